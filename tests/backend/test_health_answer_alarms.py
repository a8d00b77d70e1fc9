"""Run health on the server (issue 28), the answers' alarms: garbage, no learning signal from GRPO groups (and the
prompts that never had any), tool collapse and length hacking, judged from the samples as they arrive."""
from __future__ import annotations

import pytest

from tests.backend.conftest import auth, external_run
from tests.backend.health_helpers import API, alarm, answers, health, post_samples, send

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
