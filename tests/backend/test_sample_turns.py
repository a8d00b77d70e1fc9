"""Multi-turn samples on a real SQLite file: the engine's trajectories (tests/trajectory_samples.py), converted by
the dashboard logger, stored as conversations with their loss mask; the turn / tool / tool-error filters on the
samples, rows and export routes (the storage and the filters also on PostgreSQL); bad filter values and bad turns
name the field."""
from __future__ import annotations

import json

import pytest

from engine.loggers.dashboard import DashboardLogger
from tests.backend.conftest import DATABASES, external_run
from tests.trajectory_samples import multi_turn_samples


def logger_body(records: list[dict]) -> list[dict]:
    """What the dashboard logger posts for these records (its conversion, without its sending thread)."""
    logger = DashboardLogger.__new__(DashboardLogger)
    logger._sample_counters = {}
    return [logger._sample(r["step"], r) for r in records]


SINGLE = {"step": 1, "split": "train", "sample_index": 3, "prompt_index": 9, "prompt": "2+2=?", "response": "4",
          "score": 1.0, "tokens": ["4"], "old_log_probs": [-0.5], "extras": {"acc": 1}}


@pytest.fixture
def run_with_trajectories(client):
    run = external_run(client)
    body = logger_body(multi_turn_samples()) + [SINGLE]
    r = client.post(f"/api/v1/runs/{run['id']}/samples", json={"samples": body},
                    headers={"Authorization": f"Bearer {run['ingest_token']}"})
    assert r.status_code == 200 and r.json()["accepted"] == 4, r.text
    return run


def get(client, run, path="", **params):
    r = client.get(f"/api/v1/runs/{run['id']}/samples{path}", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_logger_sends_turns_and_mask_as_fields():
    call, failed, _ = logger_body(multi_turn_samples())
    assert failed["turns"][1]["error"] == "division by zero"  # the engine's form: the server normalizes it
    assert call["turns"][1]["tool"] == "calculator" and call["loss_mask"] == [1] * 12 + [0] * 5 + [1] * 4
    assert "turns" not in call["extras"] and "num_turns" not in call["extras"] and "loss_mask" not in call["extras"]
    assert call["extras"]["response_length"] == 16  # the model's tokens only


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_trajectories_are_stored_as_conversations(client, run_with_trajectories):
    data = get(client, run_with_trajectories, step=1, order="prompt_index")["data"]
    call, failed, plain, single = data
    model, tool, answer = call["turns"]
    assert model["role"] == "model" and model["text"] == "<c>12*34</c>" and (model["start"], model["end"]) == (0, 12)
    assert model["tool_calls"] == [{"name": "calculator", "arguments": {"expression": "12*34"}}]
    assert tool["role"] == "tool" and tool["tool"] == "calculator" and tool["text"] == "=408\n"
    assert tool["error"] is False and tool["error_message"] is None and 0 <= tool["latency_s"] < 5
    assert tool["tool_calls"] == [] and answer["text"] == "408<|im_end|>" and answer["tool_calls"] == []
    assert call["loss_mask"] == [1] * 12 + [0] * 5 + [1] * 4 and len(call["tokens"]) == 21
    assert (call["num_turns"], call["tool_error"]) == (4, False)
    assert failed["turns"][1]["error"] is True and failed["turns"][1]["error_message"] == "division by zero"
    assert failed["turns"][1]["text"] == "=error: division by zero\n" and failed["tool_error"] is True
    assert plain["num_turns"] == 2 and [t["role"] for t in plain["turns"]] == ["model"] and not plain["tool_error"]
    # a single-turn answer is as it was: no turns, no mask, its extras untouched
    assert (single["turns"], single["loss_mask"], single["num_turns"], single["tool_error"]) == (None,) * 4
    assert single["extras"] == {"acc": 1} and single["tokens"] == ["4"]
    one = client.get(f"/api/v1/runs/{run_with_trajectories['id']}/samples/{call['id']}").json()
    assert one["turns"] == call["turns"] and one["loss_mask"] == call["loss_mask"]


FILTERS = [
    ({}, [0, 1, 2, 9]),
    ({"num_turns": 4}, [0, 1]),
    ({"num_turns": 2}, [2]),
    ({"min_turns": 3}, [0, 1]),
    ({"max_turns": 3}, [2]),
    ({"tool": "calculator"}, [0, 1]),
    ({"tool": "python"}, []),
    ({"uses_tool": "true"}, [0, 1]),
    ({"uses_tool": "false"}, [2, 9]),
    ({"tool_error": "true"}, [1]),
    ({"tool_error": "false"}, [0, 2, 9]),
    ({"tool": "calculator", "tool_error": "false"}, [0]),
]


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_turn_filters(client, run_with_trajectories):
    for params, prompts in FILTERS:
        check_filter(client, run_with_trajectories, params, prompts)


def check_filter(client, run_with_trajectories, params, prompts):
    listed = get(client, run_with_trajectories, **params, order="prompt_index")
    assert [s["prompt_index"] for s in listed["data"]] == prompts and listed["count"] == len(prompts)
    rows = get(client, run_with_trajectories, "/rows", **params)
    assert sorted(r["prompt_index"] for r in rows["data"]) == prompts and rows["count"] == len(prompts)
    export = client.get(f"/api/v1/runs/{run_with_trajectories['id']}/samples/export", params=params)
    assert sorted(json.loads(line)["prompt_index"] for line in export.text.splitlines()) == prompts


def test_rows_and_export_carry_the_turns(client, run_with_trajectories):
    rows = {r["prompt_index"]: r for r in get(client, run_with_trajectories, "/rows")["data"]}
    assert (rows[0]["num_turns"], rows[0]["tools"], rows[0]["tool_error"]) == (4, ["calculator"], False)
    assert (rows[1]["tool_error"], rows[2]["tools"], rows[9]["num_turns"]) == (True, None, None)
    lines = [json.loads(line) for line in
             client.get(f"/api/v1/runs/{run_with_trajectories['id']}/samples/export").text.splitlines()]
    by_prompt = {line["prompt_index"]: line for line in lines}
    assert by_prompt[1]["turns"][1]["error_message"] == "division by zero" and by_prompt[9]["turns"] is None
    assert by_prompt[0]["loss_mask"][12:17] == [0] * 5 and by_prompt[0]["num_turns"] == 4


BAD_FILTERS = [
    ({"tool_error": "maybe"}, "tool_error"), ({"uses_tool": "2"}, "uses_tool"), ({"num_turns": 0}, "num_turns"),
    ({"min_turns": "x"}, "min_turns"), ({"tool": "rm -rf"}, "tool"), ({"min_turns": 5, "max_turns": 2}, "max_turns"),
]


def test_bad_filter_values_name_the_field(client, run_with_trajectories):
    for (params, field), path in [(b, p) for b in BAD_FILTERS for p in ("", "/rows", "/export")]:
        r = client.get(f"/api/v1/runs/{run_with_trajectories['id']}/samples{path}", params=params)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", field], r.text


def test_bad_turns_are_refused_with_the_field(client):
    run = external_run(client)
    base = {"step": 0, "sample_index": 0, "tokens": ["a", "b"]}
    for bad, words in (({"turns": [{"role": "user", "start": 0, "end": 1}]}, "turns[0].role"),
                       ({"turns": [{"role": "tool", "start": 0, "end": 5}]}, "turns[0].end"),
                       ({"turns": "hello"}, "turns"),
                       ({"loss_mask": [1, 0, 1]}, "loss_mask"),
                       ({"loss_mask": [1, 2]}, "loss_mask")):
        r = client.post(f"/api/v1/runs/{run['id']}/samples", json={"samples": [{**base, **bad}]},
                        headers={"Authorization": f"Bearer {run['ingest_token']}"})
        assert r.status_code == 422 and words in r.text, r.text


def test_turns_inside_extras_are_lifted(client):
    """An earlier dashboard logger put turns, num_turns and loss_mask in the extras."""
    run = external_run(client)
    record = multi_turn_samples()[0]
    old = {k: record[k] for k in ("step", "split", "prompt_index", "prompt", "response", "tokens")}
    old |= {"sample_index": 0, "extras": {k: record[k] for k in ("turns", "num_turns", "loss_mask")} | {"acc": 0}}
    r = client.post(f"/api/v1/runs/{run['id']}/samples", json={"samples": [old]},
                    headers={"Authorization": f"Bearer {run['ingest_token']}"})
    assert r.status_code == 200, r.text
    (stored,) = get(client, run)["data"]
    assert stored["extras"] == {"acc": 0} and stored["num_turns"] == 4 and stored["loss_mask"] == record["loss_mask"]
    assert stored["turns"][0]["tool_calls"][0]["name"] == "calculator"
    # sending the stored form back changes nothing (an export re-imported)
    again = {k: stored[k] for k in ("step", "split", "sample_index", "prompt", "response", "tokens", "turns",
                                    "loss_mask", "extras")}
    assert client.post(f"/api/v1/runs/{run['id']}/samples", json={"samples": [again]},
                       headers={"Authorization": f"Bearer {run['ingest_token']}"}).status_code == 200
    assert get(client, run)["data"][0]["turns"] == stored["turns"]
    # the same position re-sent as a single-turn answer (a batch without turns leaves the columns out of the
    # INSERT): the upsert clears them
    plain = {k: stored[k] for k in ("step", "split", "sample_index", "prompt", "response", "tokens")}
    assert client.post(f"/api/v1/runs/{run['id']}/samples", json={"samples": [plain]},
                       headers={"Authorization": f"Bearer {run['ingest_token']}"}).status_code == 200
    cleared = get(client, run)["data"][0]
    assert (cleared["turns"], cleared["loss_mask"], cleared["num_turns"], cleared["tool_error"]) == (None,) * 4
    assert get(client, run, tool="calculator")["count"] == 0
