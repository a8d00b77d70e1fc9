"""The REST API on a real SQLite file (dispatch off: runs stay queued or are recorded as external); the tests that
read and write the database the most also on PostgreSQL (tests/backend/postgres.py). Samples, logs, status reports and
progress."""
from __future__ import annotations

import json

import pytest

from tests.backend.conftest import DATABASES, auth, external_run

API = "/api/v1"
ON_BOTH = pytest.mark.parametrize("database", DATABASES, indirect=True)


# ------------------------------------------------------------------------------------------ samples
def sample(step, i, split="train", **kw):
    return {"step": step, "split": split, "sample_index": i, "prompt_index": i // 2, "group_uid": f"g{i // 2}",
            "prompt": f"p{i // 2}", "response": f"r{step}-{i}", "score": float(i % 2), "reward": float(i % 2),
            "ground_truth": "4", "data_source": "arith", "tokens": ["a", "b"], "old_log_probs": [-0.5, float("nan")],
            "extras": {"acc": 1, "nested": {"x": [1, 2]}}, **kw}


@ON_BOTH
def test_samples_ingest_and_queries(client):
    run = external_run(client)
    other = external_run(client, name="other")
    batch = [sample(s, i) for s in (1, 2) for i in range(4)] + [sample(2, 0, split="val")]
    for _ in range(2):  # Python's json writes NaN as a bare token: the server takes it and stores null
        r = client.post(f"{API}/runs/{run['id']}/samples", content=json.dumps({"samples": batch}),
                        headers={**auth(run), "Content-Type": "application/json"})
        assert r.status_code == 200 and r.json()["accepted"] == 9
    client.post(f"{API}/runs/{other['id']}/samples", content=json.dumps({"samples": [sample(1, 0), sample(1, 1)]}),
                headers={**auth(other), "Content-Type": "application/json"})
    everything = client.get(f"{API}/runs/{run['id']}/samples").json()
    assert everything["count"] == 9
    first = everything["data"][0]
    assert first["old_log_probs"] == [-0.5, None] and first["extras"] == {"acc": 1, "nested": {"x": [1, 2]}}
    assert client.get(f"{API}/runs/{run['id']}/samples", params={"step": 2, "split": "train"}).json()["count"] == 4
    assert client.get(f"{API}/runs/{run['id']}/samples", params={"group_uid": "g1"}).json()["count"] == 4
    assert client.get(f"{API}/runs/{run['id']}/samples", params={"min_score": 1}).json()["count"] == 4
    assert client.get(f"{API}/runs/{run['id']}/samples", params={"q": "r2-3"}).json()["count"] == 1
    assert client.get(f"{API}/runs/{run['id']}/samples", params={"q": "R2-3"}).json()["count"] == 1
    paged = client.get(f"{API}/runs/{run['id']}/samples", params={"limit": 2, "skip": 8}).json()
    assert paged["count"] == 9 and len(paged["data"]) == 1
    steps = client.get(f"{API}/runs/{run['id']}/samples/steps").json()
    assert [(s["step"], s["split"], s["count"]) for s in steps["data"]] == [(1, "train", 4), (2, "train", 4),
                                                                            (2, "val", 1)]
    same = client.get(f"{API}/samples/by-prompt", params={"run_id": [run["id"], other["id"]], "prompt_index": 0,
                                                         "split": "train"}).json()
    assert same["count"] == 6
    assert [(s["run_id"], s["step"]) for s in same["data"]] == [(run["id"], 1)] * 2 + [(run["id"], 2)] * 2 + [
        (other["id"], 1)] * 2
    one = client.get(f"{API}/runs/{run['id']}/samples/{first['id']}").json()
    assert one["response"] == first["response"]
    assert client.get(f"{API}/runs/{other['id']}/samples/{first['id']}").status_code == 404
    bad = client.post(f"{API}/runs/{run['id']}/samples", json={"samples": [sample(1, 0, split="test",
                                                                                    old_log_probs=[0.0])]},
                      headers=auth(run))
    assert bad.status_code == 422 and "split" in bad.json()["detail"][0]["loc"]


# --------------------------------------------------------------------------------------- logs, status
@ON_BOTH
def test_logs_and_status(client):
    run = external_run(client)
    lines = [{"seq": i, "text": f"line {i}"} for i in range(30)]
    for _ in range(2):
        assert client.post(f"{API}/runs/{run['id']}/logs", json={"lines": lines}, headers=auth(run)).status_code == 200
    tail = client.get(f"{API}/runs/{run['id']}/logs", params={"tail": 5}).json()
    assert tail["count"] == 30 and [x["text"] for x in tail["data"]] == [f"line {i}" for i in range(25, 30)]
    page = client.get(f"{API}/runs/{run['id']}/logs", params={"skip": 10, "limit": 3}).json()
    assert [x["seq"] for x in page["data"]] == [10, 11, 12]
    after = client.get(f"{API}/runs/{run['id']}/logs", params={"after_id": page["data"][-1]["id"]}).json()
    assert after["data"][0]["seq"] == 13
    r = client.post(f"{API}/runs/{run['id']}/status", json={"status": "failed", "error": "CUDA OOM"},
                    headers=auth(run))
    assert r.status_code == 200
    got = client.get(f"{API}/runs/{run['id']}").json()
    assert got["status"] == "failed" and got["error"] == "CUDA OOM" and got["log_tail"].endswith("line 29")
    # terminal states stick
    client.post(f"{API}/runs/{run['id']}/status", json={"status": "running"}, headers=auth(run))
    assert client.get(f"{API}/runs/{run['id']}").json()["status"] == "failed"
    bad = client.post(f"{API}/runs/{run['id']}/status", json={"status": "exploded"}, headers=auth(run))
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "status"]


def test_progress_and_eta_from_metrics(client):
    run = external_run(client)
    client.post(f"{API}/runs/{run['id']}/metrics", json={"points": [
        {"key": "training/global_step", "step": 5, "value": 5}, {"key": "training/total_steps", "step": 5,
                                                                 "value": 20}]}, headers=auth(run))
    got = client.get(f"{API}/runs/{run['id']}").json()
    assert got["progress_step"] == 5 and got["progress_total"] == 20 and got["eta_seconds"] is not None
