"""Run health on the server (issue 28): planted runs, their metrics and samples sent through the API step by step
as the dashboard logger sends them; each alarm fires at the step its rule says, clears, and its state survives a
restart; the auto-stop rule cancels a run with the alarm as the reason; bad input is a 422 naming the field."""
from __future__ import annotations

import math
import time

import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from tests.backend.conftest import auth, external_run

API = "/api/v1"
NAN = float("nan")


def send(client, run, step: int, values: dict[str, float], wall_time: float | None = None) -> None:
    """One step's metrics, columnar, as the dashboard logger sends them."""
    series = []
    for key, value in values.items():
        entry = {"key": key, "steps": [step], "values": ["NaN" if isinstance(value, float) and math.isnan(value)
                                                        else value]}
        if wall_time is not None:
            entry["wall_times"] = [wall_time]
        series.append(entry)
    r = client.post(f"{API}/runs/{run['id']}/metrics", json={"series": series}, headers=auth(run))
    assert r.status_code == 200, r.text


def health(client, run) -> dict:
    r = client.get(f"{API}/runs/{run['id']}/health")
    assert r.status_code == 200, r.text
    return r.json()


def alarm(body: dict, alarm_id: str) -> dict | None:
    return next((a for a in body["alarms"] if a["id"] == alarm_id), None)


def replay(client, run, steps: dict[int, dict[str, float]], alarm_id: str, restart=None) -> dict:
    """Send the steps in order, reading the health after each: the step at which the alarm was first seen firing
    and first seen cleared, and its last state. `restart`: called once the alarm fired, returns the client of a
    new server on the same database (the rest of the run goes there)."""
    seen = {"fired_at": None, "cleared_at": None}
    for step in sorted(steps):
        if restart is not None and seen["fired_at"] is not None:
            client, restart = restart(), None
            assert alarm(health(client, run), alarm_id)["state"] == "firing"  # the stored state, read back
        send(client, run, step, steps[step])
        found = alarm(health(client, run), alarm_id)
        if found and found["state"] == "firing" and seen["fired_at"] is None:
            seen["fired_at"] = step
        if found and found["state"] == "cleared" and seen["cleared_at"] is None:
            seen["cleared_at"] = step
        seen["last"] = found
    return seen


def series(**columns: list[float]) -> dict[int, dict[str, float]]:
    """Columns of values from step 1 -> {step: {key: value}} (a key spelled with __ for /)."""
    out: dict[int, dict[str, float]] = {}
    for name, values in columns.items():
        for i, v in enumerate(values):
            out.setdefault(i + 1, {})[name.replace("__", "/")] = v
    return out


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


@pytest.fixture
def restartable(settings):
    """A server on the test's SQLite file, and a way to restart it (a new app on the same file)."""
    apps = []

    def start():
        if apps:
            apps[-1].__exit__(None, None, None)
        apps.append(TestClient(create_app(settings)))
        return apps[-1].__enter__()
    yield start
    apps[-1].__exit__(None, None, None)


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


# ------------------------------------------------------------------------------------------------ samples
def answers(step: int, rows: list[tuple]) -> list[dict]:
    """(response, score[, prompt_index]) -> training samples of one step."""
    out = []
    for i, row in enumerate(rows):
        response, score = row[0], row[1]
        sample = {"step": step, "sample_index": i, "response": response, "score": score, "prompt": "Q: 1+1?"}
        if len(row) > 2:
            sample.update(prompt_index=row[2], group_uid=f"g{step}-{row[2]}")
        out.append(sample)
    return out


def post_samples(client, run, samples: list[dict]) -> None:
    r = client.post(f"{API}/runs/{run['id']}/samples", json={"samples": samples}, headers=auth(run))
    assert r.status_code == 200, r.text


GOOD = [(f"the answer is {i} because {i} minus one is {i - 1}", 0.5) for i in range(8)]


@pytest.mark.parametrize("alarm_id, bad", [
    ("degenerate", [("", 0.0)] * 2 + [("no " * 20, 0.0)] * 2 + GOOD[:4]),  # 4 of 8: empty or repetitive
    ("garbage", [("the answer \ufffd\ufffd", 0.0), ("the answer \x07 is 2", 0.0)] + GOOD[:6]),  # 2 of 8
])
def test_answer_alarms_fire_on_their_step_clear_and_survive_a_restart(restartable, alarm_id, bad):
    client = restartable()
    run = external_run(client)
    post_samples(client, run, answers(1, GOOD))
    assert health(client, run)["alarms"] == []
    post_samples(client, run, answers(2, bad[:3]))  # a step's answers arrive in batches: judged as they come
    assert alarm(health(client, run), alarm_id)["state"] == "firing"
    client = restartable()  # the step's tally so far is stored: the rest of its answers add to it
    post_samples(client, run, answers(2, bad)[3:])
    found = alarm(health(client, run), alarm_id)
    assert found["state"] == "firing" and found["since_step"] == 2 and found["samples"] == {"step": 2, "filter": None}
    assert found["values"]["answers"] == 8 and found["values"][alarm_id] == (4 if alarm_id == "degenerate" else 2)
    post_samples(client, run, answers(2, bad[:3]))  # a resend counts nothing twice
    assert alarm(health(client, run), alarm_id)["values"]["answers"] == 8
    post_samples(client, run, answers(3, GOOD))
    found = alarm(health(client, run), alarm_id)
    assert found["state"] == "cleared" and found["cleared_step"] == 3


def test_garbage_reasons():
    from backend.services.health.sample_checks import Answer, degenerate_reason, garbage_reason

    def a(text, tokens=None):
        return Answer(step=1, index=0, response=text, tokens=tokens, score=None, group=None, prompt_index=None,
                      multi_turn=False)

    assert garbage_reason(a("caf\ufffd"), None) == "replacement characters"
    assert garbage_reason(a("one\x00two"), None) == "control bytes"
    assert garbage_reason(a("tabs\tand\nnewlines\r are text"), None) is None
    looped = ["The", " answer", " is"] + [" 4"] * 13
    assert garbage_reason(a("".join(looped), looped), 16) == "token repeated to the length cap"
    assert garbage_reason(a("".join(looped), looped), 32) is None  # under the cap: it ended by itself
    assert degenerate_reason("", None) == "empty" and degenerate_reason("a b c d e f g h i j k l", None) is None
    assert degenerate_reason("x " * 8, None) == "repetitive"
    assert degenerate_reason("to be or " * 5, None) == "repetitive"  # one 3-gram covers the answer


def test_learning_signal_from_grpo_groups_and_the_prompts_without_any(client):
    """Four prompts x two answers per step; prompt 3's answers always score alike. The share of groups without
    signal, trended over 3 steps, fires at step 2 and clears at step 5; prompt 3 is listed with its answers."""
    run = external_run(client)

    def step_rows(all_equal: bool) -> list[tuple]:
        rows = []
        for prompt in range(4):
            same = all_equal or prompt == 3
            rows += [(f"answer {prompt}a", 1.0, prompt), (f"answer {prompt}b", 1.0 if same else 0.0, prompt)]
        return rows

    plan = {1: False, 2: True, 3: False, 4: False, 5: False, 6: False}
    states = {}
    for step, all_equal in plan.items():
        post_samples(client, run, answers(step, step_rows(all_equal)))
        found = alarm(health(client, run), "no-signal")
        states[step] = found and found["state"]
    assert states == {1: None, 2: "firing", 3: "firing", 4: "firing", 5: "cleared", 6: "cleared"}
    found = alarm(health(client, run), "no-signal")
    assert found["since_step"] == 2 and found["cleared_step"] == 5
    listed = client.get(f"{API}/runs/{run['id']}/health/no-signal").json()
    assert listed["count"] == 1 and [p["prompt_index"] for p in listed["data"]] == [3]
    prompt = listed["data"][0]
    assert prompt["groups"] == 5 and prompt["last_step"] == 5  # steps 1-5 closed (6 is the open one)
    assert [a["response"] for a in prompt["answers"]] == ["answer 3a", "answer 3b"]

    # the run ends: there is no step 7 to close step 6, so the end does; read twice, it is recorded once
    r = client.post(f"{API}/runs/{run['id']}/status", json={"status": "succeeded"}, headers=auth(run))
    assert r.status_code == 200, r.text
    for _ in range(2):
        listed = client.get(f"{API}/runs/{run['id']}/health/no-signal").json()
        assert listed["count"] == 1 and listed["data"][0]["prompt_index"] == 3
        assert (listed["data"][0]["groups"], listed["data"][0]["last_step"]) == (6, 6)


def test_the_last_steps_groups_count_once_the_run_ended(client):
    """A run of one step, all of whose groups scored alike, ended: each of its prompts is listed (before the fix
    nothing was: a step joined the record only when the next one's answers arrived); a late answer of that step
    is still judged but not recorded twice."""
    run = external_run(client)
    post_samples(client, run, answers(1, [("a", 1.0, 0), ("b", 1.0, 0), ("c", 0.0, 1), ("d", 0.0, 1)]))
    assert client.get(f"{API}/runs/{run['id']}/health/no-signal").json()["count"] == 0  # live: step 1 is open
    r = client.post(f"{API}/runs/{run['id']}/status", json={"status": "failed", "error": "x"}, headers=auth(run))
    assert r.status_code == 200, r.text
    listed = client.get(f"{API}/runs/{run['id']}/health/no-signal").json()
    assert listed["count"] == 2 and [(p["prompt_index"], p["groups"], p["last_step"]) for p in listed["data"]] == [
        (0, 1, 1), (1, 1, 1)]
    assert [a["response"] for a in listed["data"][0]["answers"]] == ["a", "b"]
    post_samples(client, run, [{"step": 1, "sample_index": 4, "response": "e", "score": 1.0, "prompt": "Q: 1+1?",
                                "prompt_index": 1, "group_uid": "g1-1"}])
    again = client.get(f"{API}/runs/{run['id']}/health/no-signal").json()
    assert [(p["prompt_index"], p["groups"]) for p in again["data"]] == [(0, 1), (1, 1)]


def conversation(step: int, index: int, calls: int) -> dict:
    """A multi-turn training answer (stored turns, as the dashboard logger sends them) making `calls` calculator calls."""
    turns = []
    for c in range(calls):
        turns += [{"role": "model", "text": f"<c>{index}*{c}</c>",
                   "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{index}*{c}"}}]},
                  {"role": "tool", "tool": "calculator", "text": f"={index * c}"}]
    turns.append({"role": "model", "text": f"the answer is {index}"})
    return {"step": step, "sample_index": index, "prompt": "Q: 12*34?", "score": 0.5, "turns": turns,
            "response": "".join(t["text"] for t in turns)}


def test_tool_collapse_from_the_stored_answers_when_no_metric_says(client):
    """Four multi-turn answers per step, one calculator call each for steps 1-5, none for 6-10, one again at 11:
    with no tool_call_counts/mean logged, the answers' own count fires tool-collapse at step 10 (the 5-step mean
    0 <= 0.1 x the best 1.0) and clears it at 11, as the metric would; a run that logs the metric (steady) is judged
    by the metric alone."""
    plan = {step: 1 if step <= 5 or step == 11 else 0 for step in range(1, 12)}
    run = external_run(client, overrides=["trainer.total_training_steps=100"])
    logged = external_run(client, overrides=["trainer.total_training_steps=100"])
    states = {}
    for step, calls in plan.items():
        send(client, logged, step, {"tool_call_counts/mean": 1.0, "num_turns/mean": 4.0})
        for target in (run, logged):
            post_samples(client, target, [conversation(step, i, calls) for i in range(4)])
        found = alarm(health(client, run), "tool-collapse")
        states[step] = found and (found["state"], found["since_step"])
    assert states == {**{s: None for s in range(1, 10)}, 10: ("firing", 10), 11: ("cleared", 10)}
    found = alarm(health(client, run), "tool-collapse")
    # the numbers when it fired: no call in steps 6-10, the best window steps 1-5, the prompt and one model turn
    assert found["values"] == {"tool_calls": 0.0, "tool_calls_peak": 1.0, "turns": 2.0}
    assert found["samples"] == {"step": 10, "filter": "uses_tool=false"} and "stored answers" in found["detail"]
    assert health(client, logged)["alarms"] == []


def test_length_hacking_from_the_score_length_correlation(client):
    """Within a step, score follows length (r = 1) for 3 steps: fires at step 3; a step of r = -1 brings the
    3-step mean under 0.5: cleared at step 4."""
    run = external_run(client)

    def rows(sign: float) -> list[tuple]:
        return [("word " * (4 + i), (i if sign > 0 else 7 - i) / 7) for i in range(8)]

    for step, sign in ((1, 1), (2, 1), (3, 1)):
        post_samples(client, run, answers(step, rows(sign)))
    found = alarm(health(client, run), "length-hacking")
    assert found["state"] == "firing" and found["since_step"] == 3
    assert found["values"]["correlation"] == pytest.approx(1.0)
    post_samples(client, run, answers(4, rows(-1)))
    found = alarm(health(client, run), "length-hacking")
    assert found["state"] == "cleared" and found["cleared_step"] == 4


# ------------------------------------------------------------------------------------------------ stall
def arriving_at(monkeypatch, moment: float) -> None:
    """What the server receives from now on arrives at `moment` on its clock (the stall check's), as if sent then."""
    from backend.services.health import store

    monkeypatch.setattr(store, "clock", lambda: moment)


def test_stalled_run_names_its_phase_and_clears_on_the_next_step(client, monkeypatch):
    """Ten steps 10 s apart that arrived an hour ago (planted through the server's clock): judged against the
    clock at the next read, the run is stalled, in the phase its heartbeat named; a new step clears it."""
    run = external_run(client)
    start = time.time() - 3600
    for step in range(1, 11):
        arriving_at(monkeypatch, start + 10 * step)
        send(client, run, step, {"training/global_step": step}, wall_time=start + 10 * step)
    arriving_at(monkeypatch, start + 105)
    r = client.post(f"{API}/runs/{run['id']}/status", headers=auth(run), json={
        "status": "running", "fields": {"heartbeat": {"phase": "gen", "step": 11, "time": start + 105}}})
    assert r.status_code == 200
    monkeypatch.undo()  # the server's own clock again
    found = alarm(health(client, run), "stalled")
    assert found["state"] == "firing" and found["since_step"] == 10 and found["severity"] == "error"
    assert "gen" in found["title"] and "'gen'" in found["detail"]
    assert found["values"]["median_step_s"] == 10.0 and found["values"]["limit_s"] == 100.0
    assert found["values"]["idle_s"] > 3400
    send(client, run, 11, {"training/global_step": 11})  # wall time: now
    found = alarm(health(client, run), "stalled")
    assert found["state"] == "cleared" and found["cleared_step"] == 11


def test_a_phase_that_runs_far_past_its_usual_time_is_a_stall(client, monkeypatch):
    """Steps 10 s apart, generation usually 5 s (timing_s/gen): 70 s into the next step's generation, 75 s after
    the last step, the run is stalled in gen (the step rule alone waits 100 s from the last step)."""
    run = external_run(client)
    now = time.time()
    start = now - 175  # step 10 at now - 75
    for step in range(1, 11):
        arriving_at(monkeypatch, start + 10 * step)
        send(client, run, step, {"training/global_step": step, "timing_s/gen": 5.0}, wall_time=start + 10 * step)
    arriving_at(monkeypatch, now - 70)
    beat = {"status": "running", "fields": {"heartbeat": {"phase": "gen", "step": 11, "time": now - 70,
                                                          "detail": "rollout generating: step 11 on version 9"}}}
    assert client.post(f"{API}/runs/{run['id']}/status", headers=auth(run), json=beat).status_code == 200
    monkeypatch.undo()
    found = alarm(health(client, run), "stalled")
    assert found["state"] == "firing" and found["title"] == "Run stalled in gen"
    assert "The engine says: rollout generating: step 11 on version 9" in found["detail"]
    assert found["values"]["phase_median_s"] == 5.0 and found["values"]["phase_limit_s"] == 60.0
    assert "timing_s/gen" in found["detail"] and found["values"]["phase_s"] >= 70


@pytest.mark.parametrize("skew", [-7200.0, 7200.0])
def test_an_engine_clock_hours_off_neither_fakes_nor_hides_a_stall(client, monkeypatch, skew):
    """The engine's host clock is two hours behind (or ahead of) the server's. Its steps, 10 s apart by its clock,
    arrive as they are made: the run is moving, not stalled (behind, the old check saw two hours of silence). Its
    heartbeat says the phase began 30 s before it was sent, by its clock: the server counts the phase from the
    beat's arrival less those 30 s. 200 s after the last step arrived, the run is stalled (ahead, the old check
    would have waited two more hours)."""
    from backend.services.health import store

    run = external_run(client)
    server_start = time.time() - 1000
    for step in range(1, 11):
        arriving_at(monkeypatch, server_start + 10 * step)
        send(client, run, step, {"training/global_step": step, "timing_s/gen": 5.0},
             wall_time=server_start + skew + 10 * step)
    last = server_start + 100
    arriving_at(monkeypatch, last + 40)  # phase began (engine clock) at last + 10, sent at last + 40
    beat = {"phase": "gen", "step": 11, "time": last + skew + 10, "sent": last + skew + 40}
    assert client.post(f"{API}/runs/{run['id']}/status", headers=auth(run),
                       json={"status": "running", "fields": {"heartbeat": beat}}).status_code == 200
    monkeypatch.undo()
    from sqlmodel import Session

    from backend.models import Run

    with Session(client.app.state.engine) as session:
        record = session.get(Run, run["id"])
        assert store.refresh_stalled(session, record, now=last + 50) is None
        found = alarm(store.report(session, run["id"]), "stalled")
        assert found is None or found["state"] != "firing"  # 50 s after the last step, 40 s into gen: moving
        store.refresh_stalled(session, record, now=last + 75)  # 65 s into gen, its median 5 s: stalled in gen
        found = alarm(store.report(session, run["id"]), "stalled")
        assert found["state"] == "firing" and found["title"] == "Run stalled in gen"
        assert found["values"]["idle_s"] == 75.0 and found["values"]["phase_s"] == 65.0


def test_stall_is_judged_against_an_injected_clock():
    from backend.services.health import stall

    st: dict = {}
    for step in range(1, 6):
        stall.track(st, step, 1000.0 + 30 * step)
    assert stall.judge(st, 1150.0 + 299, None).steps == [(5, False)]  # 10 x 30 s = 300 s: not yet
    late = stall.judge(st, 1150.0 + 301, {"phase": "update_actor", "time": 1160.0})
    assert late.steps == [(5, True)]
    words = late.describe(5)
    assert "'update_actor'" in words.detail and words.values["phase_s"] == pytest.approx(291)
    # the async trainer's wait for its batch names what the rollout thread is doing (engine/trainer/heartbeat.py)
    waiting = stall.judge(st, 1150.0 + 301, {"phase": "wait_rollout", "time": 1160.0,
                                             "detail": "rollout generating: step 6 on version 4, for 290.0 s"})
    assert "The engine says: rollout generating: step 6 on version 4" in waiting.describe(5).detail
    assert stall.judge({}, 1e9, None) is None  # no step times yet: nothing to compare with
    stall.note_phases(st, {"timing_s/gen": [(4, 2.0), (5, 3.0)], "timing_s/reward": [(5, 1.0)]})
    stall.note_phases(st, {"timing_s/gen": [(6, 4.0)]})
    assert st["phases"] == {"gen": [2.0, 3.0, 4.0], "reward": [1.0]}
    beat = {"phase": "gen", "step": 6, "time": 1160.0}  # generating step 6 since 1160: 3 s is its median
    assert stall.judge(st, 1160.0 + 60, beat).steps == [(5, False)]  # 60 s: never sooner than stall_min_s
    assert stall.judge(st, 1160.0 + 61, beat).steps == [(5, True)]  # long before the step rule's 1450
    assert stall.judge(st, 1160.0 + 61, {**beat, "step": 5}).steps == [(5, False)]  # step 5 was logged: stale beat
    assert stall.judge(st, 1160.0 + 61, {**beat, "phase": "reward"}).steps == [(5, False)]  # 1 time: step rule


# ------------------------------------------------------------------------------------------------ restart
def test_state_survives_a_restart(settings):
    """Three steps of a KL streak, a restart (a new app on the same SQLite file), two more: the streak went on
    (fires since step 3, as without the restart); the alarm is still there after a second restart."""
    with TestClient(create_app(settings)) as client:
        run = external_run(client)
        for step, kl in enumerate([0.0, 0.0, 0.5, 0.5, 0.5], start=1):
            send(client, run, step, {"actor/reward_kl_penalty": kl})
        assert health(client, run)["alarms"] == []
    with TestClient(create_app(settings)) as client:
        for step in (6, 7):
            send(client, run, step, {"actor/reward_kl_penalty": 0.5})
        found = alarm(health(client, run), "kl-high")
        assert found["state"] == "firing" and found["since_step"] == 3
    with TestClient(create_app(settings)) as client:
        body = health(client, run)
        assert body["status"] == "warning" and body["checked_step"] == 7
        send(client, run, 8, {"actor/reward_kl_penalty": 0.05})
        assert alarm(health(client, run), "kl-high")["cleared_step"] == 8



def age_step_one_state(settings, run_id: int, done: tuple[str, ...]) -> None:
    """Rewrite the run's step-one state as a server before issue 28's decision left it: judged once, done."""
    from sqlalchemy import text

    from backend import json_codec
    from backend.db import make_engine

    engine = make_engine(settings.db_url)
    value = ":d" if engine.dialect.name == "sqlite" else "CAST(:d AS JSON)"  # SQLite's JSON is text
    with engine.begin() as conn:
        data = conn.execute(text("SELECT data FROM health_state WHERE run_id = :r"), {"r": run_id}).scalar_one()
        data = data if isinstance(data, dict) else json_codec.loads(data)
        data["step-one"] = {name: True for name in done}
        conn.execute(text(f"UPDATE health_state SET data = {value} WHERE run_id = :r"),
                     {"d": json_codec.dumps(data), "r": run_id})
    engine.dispose()


def test_an_older_servers_step_one_alarms_are_judged_by_todays_rules_at_start(settings):
    """Runs judged before the step-one checks became setup findings kept step1-kl / step1-clip firing for good.
    A server starting on that database clears each at the step today's rule would have (the next step logging KL;
    the first step clipping in band), from the stored metrics; a running run with no such step yet is closed by
    the live check at its next step; an ended one with none keeps its finding."""
    one_batch = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    with TestClient(create_app(settings)) as client:
        ended = external_run(client, overrides=one_batch)
        running = external_run(client)
        alone = external_run(client)
        for run in (ended, running, alone):
            send(client, run, 1, {"actor/reward_kl_penalty": 0.5, "actor/pg_clipfrac": 0.3})
        assert alarm(health(client, ended), "step1-clip")["state"] == "firing"
        client.post(f"{API}/runs/{alone['id']}/status", json={"status": "succeeded"}, headers=auth(alone))
    quiet = settings.model_copy(update={"health_checks": False})
    with TestClient(create_app(quiet)) as client:  # what the old server stored after step 1, judged by it no more
        for step, clip in ((2, 0.2), (3, 0.0)):
            send(client, ended, step, {"actor/reward_kl_penalty": 0.4, "actor/pg_clipfrac": clip})
        client.post(f"{API}/runs/{ended['id']}/status", json={"status": "succeeded"}, headers=auth(ended))
    for run in (ended, running, alone):
        age_step_one_state(settings, run["id"], ("kl_done", "clip_done"))

    with TestClient(create_app(settings)) as client:  # the repair runs as the server starts
        found = {r["id"]: {a["id"]: a for a in health(client, r)["alarms"]} for r in (ended, running, alone)}
        assert (found[ended["id"]]["step1-kl"]["state"], found[ended["id"]]["step1-kl"]["cleared_step"]) == ("cleared", 2)
        assert (found[ended["id"]]["step1-clip"]["state"], found[ended["id"]]["step1-clip"]["cleared_step"]) == (
            "cleared", 3)  # step 2 still clipped
        assert found[running["id"]]["step1-kl"]["state"] == "firing"  # no later step yet: left to the live check
        assert found[alone["id"]]["step1-kl"]["state"] == "firing"  # ended at step 1: the finding stays
        listed = {r["id"]: r["health"]["firing"] for r in client.get(f"{API}/runs").json()["data"]}
        assert listed[ended["id"]] == []  # no Runs badge left
        send(client, running, 2, {"actor/reward_kl_penalty": 0.4})
        assert alarm(health(client, running), "step1-kl")["cleared_step"] == 2
    with TestClient(create_app(settings)) as client:  # once repaired, a later start changes nothing
        assert alarm(health(client, ended), "step1-kl")["cleared_step"] == 2
        assert alarm(health(client, alone), "step1-kl")["state"] == "firing"


# ------------------------------------------------------------------------------------------------ auto-stop
def test_auto_stop_cancels_a_kl_blow_up_with_the_alarm_as_reason(client):
    sick = external_run(client, overrides=["trainer.health.stop_on=[kl-high]", "trainer.health.stop_after_steps=7"])
    well = external_run(client)  # no rule: the same blow-up only warns
    for step in range(1, 13):
        kl = 0.0 if step < 3 else 10.0 ** (step - 3)
        for run in (sick, well):
            send(client, run, step, {"actor/reward_kl_penalty": kl, "training/global_step": step})
        if step == 8:
            assert client.get(f"{API}/runs/{sick['id']}").json()["status"] == "running"  # fired at 7, held 6 steps
    stopped = client.get(f"{API}/runs/{sick['id']}").json()
    assert stopped["status"] == "cancelled"
    assert "kl-high" in stopped["error"] and "since step 3" in stopped["error"] and "at step 9" in stopped["error"]
    assert client.get(f"{API}/runs/{well['id']}").json()["status"] == "running"
    assert alarm(health(client, well), "kl-high")["state"] == "firing"


def test_auto_stop_rule_is_checked_at_launch(client):
    r = client.post(f"{API}/runs", json={"launch": False, "overrides": ["trainer.health.stop_on=[kl-hgh]"]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "trainer.health.stop_on"
    r = client.post(f"{API}/runs", json={"launch": False, "overrides": ["trainer.health.stop_after_steps=0"]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "trainer.health.stop_after_steps"
    default = external_run(client)["resolved_config"]["trainer"]["health"]
    assert default == {"stop_on": [], "stop_after_steps": 1}  # off by default


def test_runs_list_summary_names_each_firing_alarm_with_its_severity(client):
    """A warning and an error at once: the run is `error`, each alarm comes with its own severity (errors first)."""
    run = external_run(client)
    other = external_run(client)
    for step in range(1, 8):
        send(client, run, step, {"actor/reward_kl_penalty": 0.0 if step < 3 else 0.5,
                                 "actor/pg_loss": NAN if step == 6 else 0.1})
    listed = {r["id"]: r["health"] for r in client.get(f"{API}/runs").json()["data"]}
    assert listed[other["id"]] == {"status": "ok", "firing": [], "alarms": []}
    assert listed[run["id"]] == {"status": "error", "firing": ["nonfinite:actor/pg_loss", "kl-high"], "alarms": [
        {"id": "nonfinite:actor/pg_loss", "severity": "error", "title": "NaN in actor/pg_loss", "since_step": 6},
        {"id": "kl-high", "severity": "warning", "title": "KL above 0.1", "since_step": 3}]}


# ------------------------------------------------------------------------------------------------ the API
def test_bad_input_and_unknown_runs(client):
    assert client.get(f"{API}/runs/999/health").status_code == 404
    assert client.get(f"{API}/runs/999/health/no-signal").status_code == 404
    r = client.get(f"{API}/runs/abc/health")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "run_id"]
    run = external_run(client)
    r = client.get(f"{API}/runs/{run['id']}/health/no-signal", params={"limit": 0})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "limit"]
    body = health(client, run)
    assert body == {"run_id": run["id"], "status": "ok", "checked_step": None, "alarms": [],
                    "thresholds": body["thresholds"]}
    from backend.services.health.thresholds import THRESHOLDS

    assert body["thresholds"] == THRESHOLDS


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
