"""Run health on the server (issue 28), the metric alarms: planted runs, their metrics sent through the API step by
step as the dashboard logger sends them; each alarm fires at the step its rule says, clears, and its state survives
a restart; the step-one findings; healthy series raise nothing; the held-out checks."""
from __future__ import annotations

import pytest

from tests.backend.conftest import auth, external_run
from tests.backend.health_helpers import API, NAN, alarm, health, replay, send, series

# (alarm id, planted steps, step it is first seen firing, since_step, cleared at, run overrides)
METRIC_CASES = [
    ("kl-high", series(actor__reward_kl_penalty=[0.0] * 3 + [0.5] * 6 + [0.05] * 2), 8, 4, 10, []),
    ("kl-low", series(actor__kl_loss=[0.0] + [0.05] * 9 + [0.001] * 6 + [0.05]), 15, 11, 17, []),
    ("values-flat", series(critic__values__std=[0.5] * 2 + [0.001] * 3 + [0.5]), 5, 3, 6, []),
    ("clip-ratio", series(response_length__clip_ratio=[0.1] * 2 + [0.9] * 3 + [0.1]), 5, 3, 6, []),
    # windows of 5: the recent mean (steps 9-13) falls below half the best earlier window (0.8) at step 13
    ("score-collapse", series(critic__score__mean=[0.8] * 10 + [0.1] * 5 + [0.8] * 5), 13, 9, 18, []),
    # an event: clears after 5 clean steps; the NaN grad norm at the skipped step is the skip, not a second alarm
    ("skipped:actor", series(actor__grad_norm_nonfinite=[0, 0, 0, 1, 0, 0, 0, 0, 0],
                             actor__grad_norm=[1.0, 1.0, 1.0, NAN, 1.0, 1.0, 1.0, 1.0, 1.0]), 4, 4, 9, []),
    ("nonfinite:actor/pg_loss", series(actor__pg_loss=[0.1, 0.1, NAN] + [0.1] * 5), 3, 3, 8, []),
    # the start is the mean of the first 5 steps; the last 5 steps' mean falls below 0.2 of it at step 14
    ("entropy-collapse", series(actor__entropy=[1.0] * 9 + [0.1] * 5 + [1.0],
                                critic__score__mean=[0.2] * 15), 14, 14, 15, []),
    ("rollout-mismatch", series(actor__rollout_log_probs_absdiff=[0.001, 0.001, 0.05, 0.001]), 3, 3, 4, []),
    ("rollout-mismatch", series(training__rollout_probs_diff_mean=[0.001, 0.03, 0.001]), 2, 2, 3, []),
    ("tool-collapse", series(tool_call_counts__mean=[2.0] * 5 + [0.0] * 5 + [2.0],
                             num_turns__mean=[4.0] * 5 + [2.0] * 5 + [4.0]), 10, 10, 11, []),
    # the engine's own zero-variance share (engine/trainer/learning_signal.py), trended over 3 steps
    ("no-signal", series(train__zero_std_group_ratio=[0.1] * 3 + [0.9] * 3 + [0.1] * 3), 5, 5, 8, []),
    # a one-time setup finding (invariant_checks.py): found at step 1, closed at the next step that logs KL
    ("step1-kl", series(actor__reward_kl_penalty=[0.05, 0.05, 0.05]), 1, 1, 2, []),
    # one mini-batch, one epoch per step: every step's only mini-batch is on-policy, so the invariant is judged
    # again each step until it holds; it clears there, and stays firing while every step clips
    ("step1-clip", series(actor__pg_clipfrac=[0.1, 0.0]), 1, 1, 2,
     ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]),
    ("step1-clip", series(actor__pg_clipfrac=[0.1, 0.2, NAN, 0.0, 0.3]), 1, 1, 4,
     ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]),
]


@pytest.mark.parametrize("alarm_id, steps, fired_at, since, cleared, overrides", METRIC_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(METRIC_CASES)])
def test_metric_alarm_fires_at_its_step_clears_and_survives_a_restart(restartable, alarm_id, steps, fired_at, since,
                                                                      cleared, overrides):
    """Each alarm on a planted run: first seen firing at the step its rule says, with its since_step; the server
    restarts right after; the run goes on on the new server, where the alarm clears at its step."""
    client = restartable()
    run = external_run(client, overrides=["trainer.total_training_steps=100", *overrides])
    seen = replay(client, run, steps, alarm_id, restart=restartable)
    client = restartable()
    assert seen["fired_at"] == fired_at, seen
    assert seen["last"]["since_step"] == since
    assert seen["cleared_at"] == cleared and seen["last"]["cleared_step"] == cleared
    assert seen["last"]["values"] and all(isinstance(v, float) for v in seen["last"]["values"].values())
    others = {a["id"] for a in health(client, run)["alarms"]} - {alarm_id}
    assert not others, f"{alarm_id}'s planted run raised other alarms too: {others}"


def test_step_one_findings_in_one_batch_and_a_run_that_starts_later(client):
    """Steps 1-3 in one batch: step1-kl fires at 1 and closes at 2 within it (the stored alarm keeps its numbers);
    a run whose metrics start at step 11 (a resumed run: its step one was its parent's) is not judged for it, and
    a clip fraction later than step 1 never raises step1-clip."""
    one_minibatch = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    run = external_run(client, overrides=one_minibatch)
    series_ = [{"key": "actor/kl_loss", "steps": [1, 2, 3], "values": [0.2, 0.01, 0.02]},
               {"key": "actor/pg_clipfrac", "steps": [1, 2, 3], "values": [0.0, 0.3, 0.3]}]
    r = client.post(f"{API}/runs/{run['id']}/metrics", json={"series": series_}, headers=auth(run))
    assert r.status_code == 200, r.text
    body = health(client, run)
    assert [(a["id"], a["state"], a["since_step"], a["cleared_step"]) for a in body["alarms"]] == [
        ("step1-kl", "cleared", 1, 2)]
    kl = body["alarms"][0]
    assert kl["values"] == {"actor/kl_loss": 0.2} and "at step 1" in kl["detail"] and body["status"] == "ok"
    resumed = external_run(client, overrides=one_minibatch)
    for step in range(11, 14):
        send(client, resumed, step, {"actor/kl_loss": 0.05, "actor/pg_clipfrac": 0.1})
    assert health(client, resumed)["alarms"] == []


def test_auto_stop_on_a_step_one_finding_needs_no_run_of_steps(client):
    """stop_after_steps counts steps a condition held; a step-one check is judged at one step, so a rule naming it
    cancels the run as soon as it fires, even when step 1 and 2 arrive in one batch (fired and closed at once)."""
    rule = ["trainer.health.stop_on=[step1-kl]", "trainer.health.stop_after_steps=5"]
    for batched in (False, True):
        run = external_run(client, overrides=rule)
        if batched:
            r = client.post(f"{API}/runs/{run['id']}/metrics", json={"series": [
                {"key": "actor/reward_kl_penalty", "steps": [1, 2], "values": [0.3, 0.3]}]}, headers=auth(run))
            assert r.status_code == 200, r.text
        else:
            send(client, run, 1, {"actor/reward_kl_penalty": 0.3})
        stopped = client.get(f"{API}/runs/{run['id']}").json()
        assert stopped["status"] == "cancelled", (batched, stopped)
        assert "step1-kl" in stopped["error"] and "since step 1" in stopped["error"]
    fine = external_run(client, overrides=rule)
    for step in (1, 2, 3):
        send(client, fine, step, {"actor/reward_kl_penalty": 0.0 if step == 1 else 0.3})
    assert client.get(f"{API}/runs/{fine['id']}").json()["status"] != "cancelled"


def test_rollout_mismatch_with_both_keys_is_bad_when_either_is(client):
    """Two mismatch metrics at one step: one over the threshold is enough (the other does not undo it)."""
    run = external_run(client)
    steps = series(actor__rollout_log_probs_absdiff=[0.001, 0.05, 0.001],
                   training__rollout_probs_diff_mean=[0.001, 0.001, 0.001])
    seen = replay(client, run, steps, "rollout-mismatch")
    assert (seen["fired_at"], seen["cleared_at"]) == (2, 3)
    assert seen["last"]["values"] == {"actor/rollout_log_probs_absdiff": 0.05, "training/rollout_probs_diff_mean": 0.001}


def test_healthy_series_raise_nothing(client):
    """A run that learns (score up, KL in band, entropy easing, no clipping) stays ok; step-one holds (KL 0)."""
    run = external_run(client, overrides=["trainer.total_training_steps=100"])
    for step in range(1, 31):
        send(client, run, step, {"critic/score/mean": 0.2 + step / 100, "actor/reward_kl_penalty":
                                 0.0 if step == 1 else 0.05, "actor/entropy": 1.0 - step / 100,
                                 "response_length/clip_ratio": 0.05, "critic/values/std": 0.3,
                                 "actor/pg_loss": 0.1, "actor/grad_norm": 1.0, "actor/grad_norm_nonfinite": 0.0,
                                 "actor/rollout_log_probs_absdiff": 0.001, "training/global_step": step})
    body = health(client, run)
    assert body["status"] == "ok" and body["alarms"] == [] and body["checked_step"] == 30


def test_held_out_checks_compare_two_validations(client):
    """Length rising while the held-out score does not, and the training score up while the held-out score falls:
    both judged at the validation of step 20 against that of step 10, cleared by the one at step 30."""
    run = external_run(client, overrides=["trainer.total_training_steps=100"])
    val = "val-core/arith/reward/mean@1"
    send(client, run, 0, {val: 0.3})
    for step in range(1, 31):
        values = {"critic/score/mean": 0.2 if step <= 10 else 0.5, "response_length/mean": 10.0 if step <= 10 else 20.0}
        if step in (10, 20, 30):
            values[val] = {10: 0.3, 20: 0.2, 30: 0.5}[step]
        send(client, run, step, values)
        body = health(client, run)
        if step == 19:
            assert body["alarms"] == []
        if step == 20:
            rising, diverging = alarm(body, "length-rising"), alarm(body, "train-heldout-divergence")
            assert rising["state"] == "firing" and rising["since_step"] == 20
            assert rising["values"] == {"length": 20.0, "length_before": 10.0, "heldout": 0.2, "heldout_before": 0.3}
            assert diverging["state"] == "firing" and diverging["values"]["train"] == pytest.approx(0.5)
            assert diverging["values"]["train_before"] == pytest.approx(0.2)
    body = health(client, run)
    assert [(a["id"], a["state"], a["cleared_step"]) for a in sorted(body["alarms"], key=lambda a: a["id"])] == [
        ("length-rising", "cleared", 30), ("train-heldout-divergence", "cleared", 30)]


def test_alarm_kinds_match_the_config_schema():
    """trainer.health.stop_on lists every alarm the server raises (by kind), and only those."""
    import typing

    from backend.services.health import metric_checks
    from engine.config.schema import HealthAlarmKind

    raised = {"skipped", "nonfinite", "kl-high", "kl-low", "values-flat", "clip-ratio", "score-collapse",
              "degenerate", "entropy-collapse", "length-hacking", "length-rising", "train-heldout-divergence",
              "garbage", "no-signal", "step1-kl", "step1-clip", "rollout-mismatch", "stalled", "tool-collapse",
              "stale-rollout", "actor-not-moving"}
    assert set(typing.get_args(HealthAlarmKind)) == raised
    assert {c[0].split(":")[0] for c in METRIC_CASES} <= raised
    assert set(metric_checks.CHECKS)  # every check module is wired in
