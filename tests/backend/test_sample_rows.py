"""The light sample rows (dense table, "What changed") and the step-overlap query (side by side) on a real
SQLite file; the rows (which SQLite reduces in SQL, other databases in Python) and the export also on PostgreSQL."""
from __future__ import annotations

import pytest

from tests.backend.conftest import DATABASES, auth, external_run


def _sample(step, i, prompt, *, split="train", score=1.0, adv=(0.5, 1.5), response="12\nmore"):
    return {"step": step, "split": split, "sample_index": i, "prompt_index": prompt, "group_uid": f"{step}-{prompt}",
            "prompt": "p" * 500, "response": response, "score": score, "data_source": "arith",
            "tokens": ["1", "2", "\n"], "advantages": list(adv), "old_log_probs": [-0.1, -0.2, -0.3]}


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_rows_are_light_and_carry_the_numbers(client):
    run = external_run(client)
    samples = [_sample(1, 0, 7, score=1.0, adv=(0.5, 1.5)), _sample(1, 1, 7, score=0.0, adv=(-1.0, None)),
               _sample(2, 0, 3, response="\n  first answer line  \nsecond"), _sample(0, 0, 7, split="val")]
    assert client.post(f"/api/v1/runs/{run['id']}/samples", json={"samples": samples}, headers=auth(run)).status_code == 200
    body = client.get(f"/api/v1/runs/{run['id']}/samples/rows", params={"step": 1, "split": "train"}).json()
    assert body["count"] == 2
    first, second = body["data"]
    assert (first["prompt_index"], first["score"], first["advantage"], first["length"], first["first_line"]) == (7, 1.0, 1.0, 3, "12")
    assert second["advantage"] == -1.0  # nulls (masked tokens) are not averaged in
    assert "prompt" not in first and "tokens" not in first and "advantages" not in first
    both = client.get(f"/api/v1/runs/{run['id']}/samples/rows", params={"step": [1, 2], "split": "train"}).json()
    assert [r["step"] for r in both["data"]] == [1, 1, 2] and both["data"][2]["first_line"] == "first answer line"
    val = client.get(f"/api/v1/runs/{run['id']}/samples/rows", params={"split": "val"}).json()
    assert [(r["step"], r["split"]) for r in val["data"]] == [(0, "val")]
    assert first["rollout_diff_max"] is None  # no rollout log-probs logged
    capped = client.get(f"/api/v1/runs/{run['id']}/samples/rows", params={"limit": 1}).json()
    assert capped["count"] == 4 and len(capped["data"]) == 1
    assert client.get("/api/v1/runs/999/samples/rows").status_code == 404


def test_rows_carry_the_question_without_the_chat_template(client):
    run = external_run(client)
    prompts = [("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?\nShow   work.<|im_end|>\n"
                "<|im_start|>assistant\n"),
               "<|im_start|>Q:82+53=?<|im_end|><|im_start|>A:",  # the tiny model's compact template
               "  What is 7 * 6?\n", "<|im_start|>user\n" + "long " * 100 + "<|im_end|>"]
    samples = [{**_sample(1, i, i), "prompt": p} for i, p in enumerate(prompts)]
    assert client.post(f"/api/v1/runs/{run['id']}/samples", json={"samples": samples}, headers=auth(run)).status_code == 200
    rows = client.get(f"/api/v1/runs/{run['id']}/samples/rows").json()["data"]
    assert [r["question"] for r in rows[:3]] == ["What is 2+2? Show work.", "82+53=?", "What is 7 * 6?"]
    assert len(rows[3]["question"]) == 200 and rows[3]["question"].startswith("long long")


def test_question_of_follows_the_ui_rules():
    """The cases of frontend/src/lib/question.test.ts: the table's question and the cards' are the same text."""
    from backend.services.samples import question_of

    shots = ("<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n2<|im_end|>\n<|im_start|>user\n3+4?<|im_end|>\n"
             "<|im_start|>assistant\n")
    llama = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
             "<|end_header_id|>\n\nName a prime.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert question_of(shots) == "3+4?"
    assert question_of(llama) == "Name a prime."
    assert question_of("<|im_start|>user\nunfinished ") == "unfinished"
    assert question_of("a <b>tag</b> is not a template") == "a <b>tag</b> is not a template"
    assert question_of("<|im_start|>system\nOnly a system turn.<|im_end|>\n<|im_start|>assistant\n") == "Only a system turn."
    assert question_of(None) == question_of("") == ""


def test_overlap_finds_the_nearest_steps_that_share_prompts(client):
    run = external_run(client)
    # steps 1..4 draw prompts (0,1), (2,3), (4,5), (0,9): only step 4 shares a prompt with step 1
    draws = {1: (0, 1), 2: (2, 3), 3: (4, 5), 4: (0, 9)}
    samples = [_sample(s, i, p) for s, ps in draws.items() for i, p in enumerate(ps)]
    samples += [_sample(v, i, p, split="val") for v in (0, 5) for i, p in enumerate((100, 101))]
    assert client.post(f"/api/v1/runs/{run['id']}/samples", json={"samples": samples}, headers=auth(run)).status_code == 200
    got = client.get(f"/api/v1/runs/{run['id']}/samples/overlap", params={"step": 1}).json()
    assert got["prompts"] == 2
    assert [(o["step"], o["shared_prompts"]) for o in got["data"]] == [(4, 1)]
    assert client.get(f"/api/v1/runs/{run['id']}/samples/overlap", params={"step": 2}).json()["data"] == []
    val = client.get(f"/api/v1/runs/{run['id']}/samples/overlap", params={"step": 5, "split": "val"}).json()
    assert [(o["step"], o["split"], o["shared_prompts"]) for o in val["data"]] == [(0, "val", 2)]
    other = external_run(client, name="other")
    assert client.post(f"/api/v1/runs/{other['id']}/samples", json={"samples": [_sample(9, 0, 1)]},
                       headers=auth(other)).status_code == 200
    across = client.get(f"/api/v1/runs/{run['id']}/samples/overlap",
                        params={"step": 1, "other_run_id": other["id"]}).json()
    assert [(o["run_id"], o["step"], o["shared_prompts"]) for o in across["data"]] == [(other["id"], 9, 1)]


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_rows_carry_the_rollout_actor_gap(client):
    run = external_run(client)
    sample = _sample(1, 0, 7)
    sample["extras"] = {"rollout_log_probs": [-0.1, -0.9, None]}  # actor: -0.1, -0.2, -0.3
    assert client.post(f"/api/v1/runs/{run['id']}/samples", json={"samples": [sample]}, headers=auth(run)).status_code == 200
    row = client.get(f"/api/v1/runs/{run['id']}/samples/rows").json()["data"][0]
    assert abs(row["rollout_diff_max"] - 0.7) < 1e-9


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_samples_export_keeps_the_filtered_set_in_every_format(client):
    import io
    import json

    import pandas as pd

    run = external_run(client)
    samples = [_sample(1, 0, 7, score=1.0), _sample(1, 1, 8, score=0.0), _sample(2, 0, 7, score=1.0)]
    samples[0]["extras"] = {"rollout_log_probs": [-0.1, -0.2, -0.4]}
    assert client.post(f"/api/v1/runs/{run['id']}/samples", json={"samples": samples}, headers=auth(run)).status_code == 200
    url = f"/api/v1/runs/{run['id']}/samples/export"
    jsonl = client.get(url, params={"step": 1, "min_score": 0.5})
    assert jsonl.status_code == 200 and jsonl.headers["content-type"].startswith("application/x-ndjson")
    assert f'run-{run["id"]}-samples.jsonl' in jsonl.headers["content-disposition"]
    lines = [json.loads(line) for line in jsonl.text.splitlines()]
    assert [(r["step"], r["prompt_index"], r["score"]) for r in lines] == [(1, 7, 1.0)]
    assert lines[0]["advantages"] == [0.5, 1.5] and lines[0]["extras"]["rollout_log_probs"] == [-0.1, -0.2, -0.4]
    csv = pd.read_csv(io.StringIO(client.get(url, params={"format": "csv", "step": 1}).text))
    assert list(csv["prompt_index"]) == [7, 8] and json.loads(csv["tokens"][0]) == ["1", "2", "\n"]
    parquet = pd.read_parquet(io.BytesIO(client.get(url, params={"format": "parquet"}).content))
    assert len(parquet) == 3 and list(parquet["old_log_probs"][0]) == [-0.1, -0.2, -0.3]
    assert json.loads(parquet["extras"][0]) == {"rollout_log_probs": [-0.1, -0.2, -0.4]}
    assert client.get(url, params={"format": "xlsx"}).status_code == 422


def test_runs_list_leaves_out_tags(client):
    kept = external_run(client, name="kept", tags=["a"])
    archived = external_run(client, name="gone", tags=["a", "archived"])
    ids = lambda params: [r["id"] for r in client.get("/api/v1/runs", params=params).json()["data"]]
    assert ids({"not_tag": "archived"}) == [kept["id"]]
    assert set(ids({})) == {kept["id"], archived["id"]}
    assert ids({"tag": "archived"}) == [archived["id"]]
