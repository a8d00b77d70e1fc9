"""The actor-not-moving alarm (issue 27: a LoRA run can never silently train nothing): the engine's
rollout/actor_weight_change and actor/lr, sent through the API step by step as the dashboard logger sends them, fire
the alarm once the actor has not moved for actor_still_steps steps in a row while its lr is above 0, with its
numbers, clear it at the first step that moves, and leave warm-up (lr 0) and runs that move alone."""
from __future__ import annotations

from backend.services.health.thresholds import THRESHOLDS
from tests.backend.conftest import external_run
from tests.backend.test_health_stale_rollout import send

API = "/api/v1"
STEPS = int(THRESHOLDS["actor_still_steps"])
STILL = THRESHOLDS["actor_still_change_max"]


def update(change: float, lr: float = 1e-3, grad: float | None = 0.5) -> dict[str, float]:
    """One step's metrics of an update and the weight sync after it (the rollout itself fresh)."""
    out = {"rollout/actor_weight_change": change, "actor/lr": lr, "rollout/weights_stale": 0.0,
           "rollout/weight_fingerprint_gap": 0.0, "rollout/stale_params": 0.0, "actor/pg_loss": 0.1}
    return out | ({"actor/grad_norm": grad} if grad is not None else {})


def alarm(client, run: dict) -> dict | None:
    body = client.get(f"{API}/runs/{run['id']}/health").json()
    return next((a for a in body["alarms"] if a["id"] == "actor-not-moving"), None)


def test_a_still_actor_fires_after_its_steps_with_its_numbers_and_clears_at_the_first_move(client):
    assert STEPS >= 2
    run = external_run(client, overrides=["actor_rollout_ref.model.lora_rank=8", "trainer.total_training_steps=100"])
    # steps 1 .. STEPS-1 still, then a move: the streak starts again; then STEPS still steps (floating-point noise
    # of an unchanged fingerprint counts as still), then moving again
    plan = {s: update(0.0) for s in range(1, STEPS)}
    plan[STEPS] = update(0.02)
    first = STEPS + 1
    plan |= {s: update(STILL / 100 if s == first else 0.0, grad=0.7) for s in range(first, first + STEPS)}
    fires = first + STEPS - 1
    plan[fires + 1] = update(0.015)
    seen = {}
    for step, values in plan.items():
        send(client, run, step, values)
        found = alarm(client, run)
        seen[step] = found and found["state"]
        if step == fires:  # fired at the STEPS-th still step in a row, since the first of them
            assert found["severity"] == "error" and found["since_step"] == first
            assert found["key"] == "rollout/actor_weight_change"
            assert found["values"] == {"rollout/actor_weight_change": 0.0, "actor/lr": 1e-3, "actor/grad_norm": 0.7}
            # a gradient that never reaches the weights, not a missing learning signal
            assert "never reaches the weights" in found["detail"] and "LoRA adapter" in found["detail"]
            listed = client.get(f"{API}/runs").json()["data"]
            assert [(r["health"]["status"], r["health"]["firing"]) for r in listed if r["id"] == run["id"]] == [
                ("error", ["actor-not-moving"])]
    assert seen == {**{s: None for s in range(1, fires)}, fires: "firing", fires + 1: "cleared"}, seen
    found = alarm(client, run)
    assert found["since_step"] == first and found["cleared_step"] == fires + 1
    body = client.get(f"{API}/runs/{run['id']}/health").json()
    assert body["status"] == "ok" and body["thresholds"]["actor_still_steps"] == STEPS


def test_warm_up_a_moving_actor_and_an_unknown_lr_raise_nothing_and_a_zero_gradient_is_named(client):
    moving = external_run(client, overrides=["trainer.total_training_steps=100"])
    for step in range(1, STEPS + 1):  # lr warm-up from 0: nothing trains yet, by design
        send(client, moving, step, update(0.0, lr=0.0))
    for step in range(STEPS + 1, 3 * STEPS + 2):  # tiny but real moves (one fp32 ulp of one entry is ~1e-11)
        send(client, moving, step, update(STILL * 100))
    body = client.get(f"{API}/runs/{moving['id']}/health").json()
    assert body["alarms"] == [] and body["checked_step"] == 3 * STEPS + 1

    no_lr = external_run(client, overrides=["trainer.total_training_steps=100"])
    for step in range(1, STEPS + 2):  # an engine that logs no lr: nothing to judge by
        values = update(0.0)
        del values["actor/lr"]
        send(client, no_lr, step, values)
    assert alarm(client, no_lr) is None

    # the lr logged once, the changes in later batches: the last lr holds; a zero gradient is named as the cause
    silent = external_run(client, overrides=["trainer.total_training_steps=100"])
    send(client, silent, 1, {"actor/lr": 1e-6})
    for step in range(1, STEPS + 1):
        send(client, silent, step, {"rollout/actor_weight_change": 0.0, "actor/grad_norm": 0.0})
    found = alarm(client, silent)
    assert found["state"] == "firing" and found["since_step"] == 1, found
    assert found["values"]["actor/lr"] == 1e-6 and "no learning signal" in found["detail"]
