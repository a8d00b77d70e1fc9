"""The REST API on a real SQLite file (dispatch off: runs stay queued or are recorded as external); the tests that
read and write the database the most also on PostgreSQL (tests/backend/postgres.py)."""
from __future__ import annotations

import io
import json
import math
import re

import pyarrow.parquet as pq
import pytest

from tests.backend.conftest import DATABASES, auth, external_run

API = "/api/v1"
ON_BOTH = pytest.mark.parametrize("database", DATABASES, indirect=True)


# ---------------------------------------------------------------------------------------- experiments
@ON_BOTH
def test_experiments_crud(client):
    created = client.post(f"{API}/experiments", json={"name": "gsm8k", "description": "ppo"}).json()
    assert created["name"] == "gsm8k" and created["run_count"] == 0
    assert client.post(f"{API}/experiments", json={"name": "gsm8k"}).status_code == 409
    bad = client.post(f"{API}/experiments", json={"name": ""})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "name"
    client.post(f"{API}/experiments", json={"name": "other"})
    assert [e["name"] for e in client.get(f"{API}/experiments", params={"q": "GSM"}).json()["data"]] == ["gsm8k"]
    listed = client.get(f"{API}/experiments", params={"limit": 1}).json()
    assert listed["count"] == 2 and len(listed["data"]) == 1
    patched = client.patch(f"{API}/experiments/{created['id']}", json={"description": "grpo"}).json()
    assert patched["description"] == "grpo" and patched["name"] == "gsm8k"
    external_run(client, experiment_id=created["id"])
    assert client.get(f"{API}/experiments/{created['id']}").json()["run_count"] == 1
    # its run is active (external runs start as running): refused
    assert client.delete(f"{API}/experiments/{created['id']}").status_code == 409
    assert client.delete(f"{API}/experiments/{listed['data'][0]['id'] - 0}").status_code in (204, 409)
    assert client.get(f"{API}/experiments/999").status_code == 404


# --------------------------------------------------------------------------------------------- runs
def test_create_run_validates_with_engine_schema(client):
    r = client.post(f"{API}/runs", json={"overrides": ["trainer.total_trainig_steps=2"]})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["field"] == "trainer.total_trainig_steps"
    assert detail["loc"] == ["body", "config", "trainer", "total_trainig_steps"]
    assert "trainer.total_training_steps" in detail["msg"]  # the closest valid key
    r = client.post(f"{API}/runs", json={"config": {"data": {"train_batch_size": "many"}}})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "data.train_batch_size"
    r = client.post(f"{API}/runs", json={"preset": "../../etc/passwd"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "preset"]
    r = client.post(f"{API}/runs", json={"experiment_id": 12345})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "experiment_id"]


@ON_BOTH
def test_run_lifecycle_without_dispatch(client, settings):
    r = client.post(f"{API}/runs", json={"name": "a", "preset": "demo", "tags": ["x", "y"],
                                         "overrides": ["trainer.total_training_steps=2"]})
    assert r.status_code == 201, r.text
    run = r.json()
    assert run["status"] == "queued" and run["ingest_token"] is None and "ingest_token_hash" not in run
    assert run["resolved_config"]["trainer"]["total_training_steps"] == 2
    assert run["config"] == {"trainer": {"total_training_steps": 2}} and run["preset"] == "demo"
    assert (settings.runs_dir / str(run["id"])).is_dir()
    assert client.delete(f"{API}/runs/{run['id']}").status_code == 409  # queued = active
    cancelled = client.post(f"{API}/runs/{run['id']}/cancel").json()
    assert cancelled["status"] == "cancelled" and cancelled["finished_at"]
    assert client.post(f"{API}/runs/{run['id']}/cancel").status_code == 409

    fork = client.post(f"{API}/runs/{run['id']}/fork", json={"overrides": ["algorithm.adv_estimator=rloo"]}).json()
    assert fork["parent_id"] == run["id"] and fork["parent_relation"] == "fork"
    assert fork["config"] == {"trainer": {"total_training_steps": 2}, "algorithm": {"adv_estimator": "rloo"}}
    assert client.post(f"{API}/runs/{run['id']}/fork", json={"config": {"nope": 1}}).status_code == 422

    assert client.post(f"{API}/runs/{run['id']}/resume").status_code == 409  # no checkpoint
    step_dir = settings.runs_dir / str(run["id"]) / "checkpoints" / "global_step_7"
    step_dir.mkdir(parents=True)
    (step_dir / "model.pt").write_bytes(b"x" * 10)
    resumed = client.post(f"{API}/runs/{run['id']}/resume").json()
    assert resumed["parent_relation"] == "resume"
    assert resumed["resolved_config"]["trainer"]["resume_from_path"] == str(step_dir.resolve())

    files = client.get(f"{API}/runs/{run['id']}/files").json()
    assert files["count"] == 1 and files["data"][0]["kind"] == "checkpoint" and files["data"][0]["step"] == 7
    got = client.get(f"{API}/runs/{run['id']}/files/checkpoints/global_step_7/model.pt")
    assert got.status_code == 200 and got.content == b"x" * 10

    client.post(f"{API}/runs/{fork['id']}/cancel")
    assert client.delete(f"{API}/runs/{fork['id']}").status_code == 204
    assert client.get(f"{API}/runs/{fork['id']}").status_code == 404


@ON_BOTH
def test_run_list_filters_sort_paging(client):
    a = external_run(client, name="alpha", tags=["base"], overrides=["algorithm.adv_estimator=grpo",
                                                                       "actor_rollout_ref.rollout.n=4"])
    b = external_run(client, name="beta", tags=["base", "kl"])
    external_run(client, name="gamma", experiment_name="other")
    client.post(f"{API}/runs/{b['id']}/status", json={"status": "succeeded"}, headers=auth(b))
    runs = client.get(f"{API}/runs").json()
    assert runs["count"] == 3 and [r["name"] for r in runs["data"]] == ["gamma", "beta", "alpha"]
    assert client.get(f"{API}/runs", params={"sort": "name"}).json()["data"][0]["name"] == "alpha"
    assert client.get(f"{API}/runs", params={"status": "succeeded"}).json()["data"][0]["id"] == b["id"]
    assert client.get(f"{API}/runs", params={"tag": "kl"}).json()["count"] == 1
    assert client.get(f"{API}/runs", params={"tag": ["base"]}).json()["count"] == 2
    assert client.get(f"{API}/runs", params={"q": "amm"}).json()["count"] == 1
    assert client.get(f"{API}/runs", params={"q": "GAMM"}).json()["count"] == 1  # any case, on every database
    client.post(f"{API}/runs/{a['id']}/metrics", headers=auth(a),
                json={"points": [{"key": "training/global_step", "step": 3, "value": 3}]})
    for sort, names in (("-progress_step", ["alpha", "gamma", "beta"]), ("progress_step", ["gamma", "beta", "alpha"])):
        assert [r["name"] for r in client.get(f"{API}/runs", params={"sort": sort}).json()["data"]] == names, sort
    grpo = client.get(f"{API}/runs", params={"config": "algorithm.adv_estimator=grpo"}).json()
    assert [r["id"] for r in grpo["data"]] == [a["id"]]
    assert client.get(f"{API}/runs", params={"config": "actor_rollout_ref.rollout.n=4"}).json()["count"] == 1
    page = client.get(f"{API}/runs", params={"limit": 2, "skip": 2}).json()
    assert page["count"] == 3 and len(page["data"]) == 1
    r = client.get(f"{API}/runs", params={"sort": "password"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "sort"]
    assert client.get(f"{API}/runs", params={"status": "bogus"}).status_code == 422
    assert client.get(f"{API}/runs", params={"config": "nonsense"}).status_code == 422


@ON_BOTH
def test_run_list_carries_the_latest_held_out_score(client):
    from sqlmodel import Session, select

    from backend.models import Event

    a, b, c, d = (external_run(client, name=n) for n in ("a", "b", "c", "d"))
    mean_key = "val-core/arith/reward/mean@1"
    points = [{"key": "critic/score/mean", "step": s, "value": 0.3} for s in (1, 2, 3)]
    points += [{"key": "val-core/arith/reward/best@4/mean", "step": 3, "value": 0.9},  # sorts first, not the score
               {"key": mean_key, "step": 0, "value": 0.2}, {"key": mean_key, "step": 2, "value": 0.565}]
    assert client.post(f"{API}/runs/{a['id']}/metrics", json={"points": points}, headers=auth(a)).status_code == 200
    # a later validation that came out NaN does not replace the last finite score
    client.post(f"{API}/runs/{a['id']}/metrics", json={"points": [{"key": mean_key, "step": 3, "value": "NaN"}]},
                headers=auth(a))
    # no reward/mean@N key: the first val-core key; "val-core0..." is not under val-core/
    client.post(f"{API}/runs/{b['id']}/metrics", headers=auth(b), json={"series": [
        {"key": "val-core/gsm8k/acc", "steps": [5, 9], "values": [0.1, 0.4]},
        {"key": "val-core0", "steps": [9], "values": [7]}]})
    # a reward function that returns acc: verl's val-core holds acc, whose best@N sorts before mean@N
    client.post(f"{API}/runs/{d['id']}/metrics", headers=auth(d), json={"series": [
        {"key": "val-core/gsm8k/acc/best@4/mean", "steps": [5], "values": [0.8]},
        {"key": "val-core/gsm8k/acc/mean@4", "steps": [5], "values": [0.35]}]})
    got = {r["id"]: r for r in client.get(f"{API}/runs").json()["data"]}
    assert (got[d["id"]]["val_score"], got[d["id"]]["val_score_key"]) == (0.35, "val-core/gsm8k/acc/mean@4")
    assert (got[a["id"]]["val_score"], got[a["id"]]["val_score_key"], got[a["id"]]["val_score_step"]) == (0.565, mean_key, 2)
    assert (got[b["id"]]["val_score"], got[b["id"]]["val_score_key"], got[b["id"]]["val_score_step"]) == (0.4, "val-core/gsm8k/acc", 9)
    assert (got[c["id"]]["val_score"], got[c["id"]]["val_score_key"]) == (None, None)
    assert "val_score" not in client.get(f"{API}/runs/{a['id']}").json()  # the list's summary field
    # each validation tells the runs feed the new held-out score (the runs table updates live)
    with Session(client.app.state.engine) as session:
        feed = [e.data for e in session.exec(select(Event).where(Event.channel == "runs", Event.kind == "progress"))
                if "val_score" in e.data]
    assert [(e["id"], e["val_score"]) for e in feed] == [(a["id"], 0.565), (a["id"], 0.565), (b["id"], 0.4),
                                                        (d["id"], 0.35)]



@ON_BOTH
def test_run_list_sorts_by_held_out_score(client):
    """`sort=-val_score`: the latest held-out score as the Runs table shows it, highest first, across pages; runs
    without one last either way; equal scores newest first."""
    runs = [external_run(client, name=n) for n in ("low", "none", "high", "mid", "tie", "also-none")]
    key = "val-core/arith/reward/mean@1"
    for run, series in zip(runs, ([0.9, 0.1], None, [0.2, 0.8], [0.5], [0.5], None)):
        if series is not None:  # the latest finite value counts (low's 0.1, not its earlier 0.9)
            body = {"series": [{"key": key, "steps": list(range(len(series))), "values": series}]}
            assert client.post(f"{API}/runs/{run['id']}/metrics", json=body, headers=auth(run)).status_code == 200

    def names(sort: str, **params) -> list[str]:
        got = client.get(f"{API}/runs", params={"sort": sort, **params}).json()
        assert got["count"] == len(runs)
        return [r["name"] for r in got["data"]]

    assert names("-val_score") == ["high", "tie", "mid", "low", "also-none", "none"]
    assert names("val_score") == ["low", "tie", "mid", "high", "also-none", "none"]
    assert names("-val_score", limit=2, skip=1) == ["tie", "mid"]  # paged after sorting, not before
    scores = [r["val_score"] for r in client.get(f"{API}/runs", params={"sort": "-val_score"}).json()["data"]]
    assert scores == [0.8, 0.5, 0.5, 0.1, None, None]
    only_mid = client.get(f"{API}/runs", params={"sort": "-val_score", "q": "mi"}).json()
    assert only_mid["count"] == 1 and only_mid["data"][0]["name"] == "mid"


@ON_BOTH
def test_tag_filters_ignore_case_and_match_non_ascii_tags_on_every_database(client):
    a = external_run(client, name="a", tags=["Baseline", "température-0.7", "Straße"])
    b = external_run(client, name="b", tags=["baseline", "检查点", "50%_off"])
    external_run(client, name="c", tags=["other"])

    def names(**params) -> list[str]:
        return sorted(r["name"] for r in client.get(f"{API}/runs", params=params).json()["data"])

    assert names(tag="baseline") == names(tag="BASELINE") == ["a", "b"]
    assert names(tag="Température-0.7") == ["a"]
    assert names(tag="STRASSE") == names(tag="straße") == ["a"]  # Unicode case folding
    assert names(tag="检查点") == ["b"]
    assert names(tag="50%_off") == ["b"] and names(tag="50%") == names(tag="5_%_off") == []  # no wildcards
    assert names(tag=["baseline", "straße"]) == ["a"]
    assert names(tag="missing") == []
    assert names(not_tag="BASELINE") == ["c"]
    assert names(not_tag="missing") == ["a", "b", "c"]
    assert names(tag="base") == []  # a whole tag, not a part of one
    assert a["tags"] == ["Baseline", "température-0.7", "Straße"] and b["tags"][1] == "检查点"  # stored as given


# ------------------------------------------------------------------------------------------ metrics
@ON_BOTH
def test_metrics_ingest_is_idempotent_and_queryable(client, settings):
    run = external_run(client)
    points = [{"key": "critic/score/mean", "step": s, "value": s / 10} for s in range(100)]
    points += [{"key": "actor/pg_loss", "step": 5, "value": "NaN"}, {"key": "actor/pg_loss", "step": 6,
                                                                       "value": "Infinity"}]
    for _ in range(2):  # the same batch twice stores it once
        r = client.post(f"{API}/runs/{run['id']}/metrics", json={"points": points}, headers=auth(run))
        assert r.status_code == 200 and r.json()["accepted"] == 102
    series = client.get(f"{API}/runs/{run['id']}/metrics", params={"key": "critic/score/mean"}).json()
    assert series["data"][0]["total_points"] == 100 and series["data"][0]["steps"] == list(range(100))
    loss = client.get(f"{API}/runs/{run['id']}/metrics", params={"key": "actor/pg_loss"}).json()["data"][0]
    assert loss["values"] == ["NaN", "Infinity"]
    keys = client.get(f"{API}/runs/{run['id']}/metrics/keys").json()
    assert keys == {"data": ["actor/pg_loss", "critic/score/mean"], "count": 2}
    latest = {m["key"]: m for m in client.get(f"{API}/runs/{run['id']}/metrics/latest").json()["data"]}
    assert latest["critic/score/mean"]["step"] == 99 and latest["critic/score/mean"]["value"] == 9.9
    ranged = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "critic/score/mean",
                                                  "step_min": 10, "step_max": 19}).json()["data"][0]
    assert ranged["steps"] == list(range(10, 20))
    # overwrite = upsert
    client.post(f"{API}/runs/{run['id']}/metrics", json={"points": [{"key": "critic/score/mean", "step": 3,
                                                                     "value": 42}]}, headers=auth(run))
    assert client.get(f"{API}/runs/{run['id']}/metrics", params={"key": "critic/score/mean"}
                      ).json()["data"][0]["values"][3] == 42


def test_metrics_limit_is_413(client, settings):
    run = external_run(client)
    limit = settings.max_metric_points_per_request
    too_many = [{"key": "k", "step": s, "value": 1.0} for s in range(limit + 1)]
    r = client.post(f"{API}/runs/{run['id']}/metrics", json={"points": too_many}, headers=auth(run))
    assert r.status_code == 413 and "points" in r.json()["detail"]
    r = client.post(f"{API}/runs/{run['id']}/metrics", json={"points": [{"key": "k", "step": -1, "value": 1}]},
                    headers=auth(run))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "step"


@ON_BOTH
def test_downsampling_keeps_spikes(client):
    run = external_run(client)
    n = 5000
    values = [math.sin(s / 100) for s in range(n)]
    values[1234], values[4321] = 100.0, -100.0
    points = [{"key": "loss", "step": s, "value": v} for s, v in enumerate(values)]
    client.post(f"{API}/runs/{run['id']}/metrics", json={"points": points}, headers=auth(run))
    for max_points in (50, 200, 1000):
        s = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "loss",
                                                 "max_points": max_points}).json()["data"][0]
        assert s["downsampled"] and len(s["steps"]) <= max_points and s["total_points"] == n
        assert s["steps"] == sorted(s["steps"])
        assert 100.0 in s["values"] and -100.0 in s["values"]
        assert s["steps"][s["values"].index(100.0)] == 1234


@ON_BOTH
def test_metrics_export_csv_and_parquet(client):
    run = external_run(client)
    points = [{"key": k, "step": s, "value": s * (i + 1)} for s in range(5) for i, k in enumerate(["a", "b"])]
    client.post(f"{API}/runs/{run['id']}/metrics", json={"points": points}, headers=auth(run))
    csv = client.get(f"{API}/runs/{run['id']}/metrics/export", params={"format": "csv"})
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    lines = csv.text.strip().splitlines()
    assert lines[0] == "step,a,b" and lines[3] == "2,2.0,4.0"
    parquet = client.get(f"{API}/runs/{run['id']}/metrics/export", params={"format": "parquet", "layout": "long"})
    table = pq.read_table(io.BytesIO(parquet.content))
    assert table.num_rows == 10 and table.column_names == ["step", "key", "value", "wall_time"]
    assert client.get(f"{API}/runs/{run['id']}/metrics/export", params={"format": "xlsx"}).status_code == 422


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


# ---------------------------------------------------------------------------------- config, health, UI
def test_config_schema_and_presets(client):
    from engine.config import json_schema

    assert client.get(f"{API}/config/schema").json() == json_schema()
    presets = client.get(f"{API}/config/presets").json()
    assert {"demo", "demo_ppo"} <= {p["name"] for p in presets["data"]}
    # the first demo (what --demo launches, what the New run form opens on) is the seed's PPO; GRPO is the second
    assert presets["demo"] == "demo_ppo"
    assert client.get(f"{API}/config/presets/demo_ppo").json()["config"]["algorithm"]["adv_estimator"] == "gae"
    assert client.get(f"{API}/config/presets/demo").json()["config"]["algorithm"]["adv_estimator"] == "grpo"
    tool_use = client.get(f"{API}/config/presets/calculator_tool_use").json()["config"]  # the New run form's preset
    assert tool_use["actor_rollout_ref"]["model"]["path"] == "builtin:tiny-calc"
    assert tool_use["actor_rollout_ref"]["rollout"]["multi_turn"]["enable"] is True
    assert client.get(f"{API}/config/presets/..%2F..%2Fsecrets").status_code == 404
    ok = client.post(f"{API}/config/validate", json={"preset": "demo", "overrides": ["actor_rollout_ref.rollout.temperature=0.5"]})
    assert ok.status_code == 200, ok.text
    assert ok.json()["resolved_config"]["actor_rollout_ref"]["rollout"]["temperature"] == 0.5
    bad = client.post(f"{API}/config/validate", json={"overrides": ["algorithm.adv_estimator=magic"]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "algorithm.adv_estimator"


def test_health_and_docs(client):
    assert client.get(f"{API}/health").json()["database"] == "ok"
    assert client.get("/openapi.json").json()["info"]["title"] == "rlstudio"
    assert client.get("/docs").status_code == 200
    assert client.get(f"{API}/nope").status_code == 404


def test_operation_ids_are_short_and_unique(client):
    """The generated client's names come from these: `sdk.listSamples`, not `listSamplesApiV1RunsRunIdSamplesGet`."""
    paths = client.get("/openapi.json").json()["paths"]
    ids = [op["operationId"] for methods in paths.values() for op in methods.values()]
    assert len(ids) == len(set(ids)), sorted(ids)
    assert all(re.fullmatch(r"[a-z]+([A-Z][a-z]+)*", i) and "Api" not in i for i in ids), ids
    assert paths["/api/v1/runs/{run_id}/samples"]["get"]["operationId"] == "listSamples"


def test_ui_not_built_page(client):
    page = client.get("/")
    assert page.status_code == 200 and "not built" in page.text and "/docs" in page.text


def test_ui_served_with_spa_fallback(tmp_path, settings):
    from fastapi.testclient import TestClient

    from backend.app import create_app

    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<html>app</html>")
    (dist / "assets" / "app.js").write_text("console.log(1)")
    (tmp_path / "secret.txt").write_text("top secret")
    settings.frontend_dir = dist
    with TestClient(create_app(settings)) as c:
        assert c.get("/").text == "<html>app</html>"
        assert c.get("/assets/app.js").text == "console.log(1)"
        assert c.get("/runs/12/samples").text == "<html>app</html>"  # client-side route
        leaked = c.get("/assets/..%2F..%2Fsecret.txt")
        assert "top secret" not in leaked.text


def test_run_files_refuse_path_traversal(client, settings, tmp_path):
    run = external_run(client)
    run_dir = settings.runs_dir / str(run["id"])
    (run_dir / "ok.txt").write_text("fine")
    (tmp_path / "outside.txt").write_text("secret")
    (run_dir / "link").symlink_to(tmp_path / "outside.txt")
    other = external_run(client)
    (settings.runs_dir / str(other["id"]) / "theirs.txt").write_text("other run")
    assert client.get(f"{API}/runs/{run['id']}/files/ok.txt").text == "fine"
    for path in ["..%2F..%2Foutside.txt", "%2E%2E/%2E%2E/outside.txt", "link", f"..%2F{other['id']}%2Ftheirs.txt",
                 "%2Fetc%2Fpasswd", "..%2F..%2F..%2F..%2F..%2F..%2Fetc%2Fpasswd"]:
        r = client.get(f"{API}/runs/{run['id']}/files/{path}")
        assert r.status_code in (404, 405), (path, r.status_code)
        assert "secret" not in r.text and "other run" not in r.text and "root:" not in r.text


@ON_BOTH
def test_feed_events_are_pruned_after_retention(client, settings):
    from sqlmodel import Session, select

    from backend.models import Event
    from backend.services.events import prune

    run = external_run(client)
    client.post(f"{API}/runs/{run['id']}/metrics", json={"points": [{"key": "k", "step": 1, "value": 1}]},
                headers=auth(run))
    engine = client.app.state.engine
    with Session(engine) as session:
        assert session.exec(select(Event)).all()
    assert prune(engine, older_than_s=3600) == 0
    assert prune(engine, older_than_s=-1) > 0
    with Session(engine) as session:
        assert session.exec(select(Event)).all() == []
    assert client.get(f"{API}/runs/{run['id']}/metrics").json()["count"] == 1  # the data stays


@ON_BOTH
def test_metrics_columnar_series_ingest(client, settings):
    run = external_run(client)
    body = {"series": [{"key": "a", "steps": [1, 2, 3], "values": [0.1, "NaN", 0.3]},
                       {"key": "b", "steps": [1], "values": [5.0], "wall_times": [1700000000.0]}],
            "points": [{"key": "c", "step": 1, "value": 1.0}]}
    r = client.post(f"{API}/runs/{run['id']}/metrics", json=body, headers=auth(run))
    assert r.status_code == 200 and r.json()["accepted"] == 5
    data = {s["key"]: s for s in client.get(f"{API}/runs/{run['id']}/metrics").json()["data"]}
    assert data["a"]["values"] == [0.1, "NaN", 0.3] and data["b"]["wall_times"] == [1700000000.0]
    bad = client.post(f"{API}/runs/{run['id']}/metrics", json={"series": [{"key": "a", "steps": [1, 2],
                                                                          "values": [1.0]}]}, headers=auth(run))
    assert bad.status_code == 422 and "same length" in bad.text
    over = settings.max_metric_points_per_request + 1
    big = {"series": [{"key": "a", "steps": list(range(over)), "values": [1.0] * over}]}
    assert client.post(f"{API}/runs/{run['id']}/metrics", json=big, headers=auth(run)).status_code == 413


@ON_BOTH
def test_downsampling_keeps_nan_and_matches_numpy_fallback(client):
    from sqlmodel import Session

    from backend.services import metrics

    run = external_run(client)
    n = 3000
    values = [float(s % 17) for s in range(n)]
    values[2000] = "NaN"
    values[10], values[2999] = 1e6, -1e6
    client.post(f"{API}/runs/{run['id']}/metrics", json={"series": [{"key": "x", "steps": list(range(n)),
                                                                     "values": values}]}, headers=auth(run))
    got = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "x", "max_points": 100}).json()["data"][0]
    assert len(got["steps"]) <= 100 and got["steps"] == sorted(got["steps"]) and got["downsampled"]
    assert got["values"][got["steps"].index(2000)] == "NaN"
    assert 1e6 in got["values"] and -1e6 in got["values"]
    with Session(client.app.state.engine) as session:  # the portable path keeps the same extremes
        portable = metrics._series_numpy(session, [run["id"]], ["x"], None, None, 100)[0]
    assert len(portable.steps) <= 100 and {1e6, -1e6, "NaN"} <= set(portable.values)
    small = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "x", "step_min": 5, "step_max": 14,
                                                 "max_points": 100}).json()["data"][0]
    assert small["steps"] == list(range(5, 15)) and not small["downsampled"]


def test_validate_accepts_verl_09_layout_and_stores_the_canonical_one(client):
    r = client.post("/api/v1/config/validate", json={
        "config": {"critic": {"fsdp": {"param_offload": True, "optimizer_offload": True}}},
        "overrides": ["ray_kwargs.ray_init.num_cpus=2", "actor_rollout_ref.actor.optim.clip_grad=0.5"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["config"]["critic"]["model"]["fsdp_config"]["param_offload"] is True
    assert body["config"]["ray_init"]["num_cpus"] == 2 and "ray_kwargs" not in body["config"]
    assert body["resolved_config"]["actor_rollout_ref"]["actor"]["grad_clip"] == 0.5
    r = client.post("/api/v1/config/validate", json={"overrides": ["actor_rollout_ref.rollout.mode=async"]})
    assert r.status_code == 422 and "actor_rollout_ref.rollout.mode" in r.text


@ON_BOTH
def test_64_bit_numbers_and_nul_characters_are_stored(client, database):
    """What the API takes, every database stores: integers up to 64 bits (PostgreSQL's INTEGER is 32) and text with
    NUL characters (which PostgreSQL's text cannot hold: U+FFFD stands in for each)."""
    run = external_run(client)
    big = 2**62
    r = client.post(f"{API}/runs/{run['id']}/metrics", headers=auth(run), json={"points": [
        {"key": "k\x00", "step": big, "value": 1.5}, {"key": "training/global_step", "step": big, "value": big}]})
    assert r.status_code == 200, r.text
    nul = "\x00" if database is None else "\ufffd"
    series = client.get(f"{API}/runs/{run['id']}/metrics", params={"key": f"k{nul}"}).json()["data"]
    assert [(s["key"], s["steps"], s["values"]) for s in series] == [(f"k{nul}", [big], [1.5])]
    assert client.get(f"{API}/runs/{run['id']}").json()["progress_step"] == big
    answer = {"step": big, "sample_index": big, "prompt_index": big, "prompt": "2+2=\x00?", "response": "4\x00",
              "extras": {"raw": "a\x00b"}}
    stored = client.post(f"{API}/runs/{run['id']}/samples", headers=auth(run), json={"samples": [answer]})
    assert stored.status_code == 200, stored.text
    got = client.get(f"{API}/runs/{run['id']}/samples", params={"prompt_index": big, "q": "4\x00"}).json()["data"]
    assert [(s["step"], s["sample_index"], s["prompt"], s["response"], s["extras"]) for s in got] == [
        (big, big, f"2+2={nul}?", f"4{nul}", {"raw": "a\x00b"})]  # JSON keeps it: escaped as \u0000
    lines = [{"seq": big, "text": "tab\x00bed"}]
    assert client.post(f"{API}/runs/{run['id']}/logs", headers=auth(run), json={"lines": lines}).status_code == 200
    assert [(x["seq"], x["text"]) for x in client.get(f"{API}/runs/{run['id']}/logs").json()["data"]] == [
        (big, f"tab{nul}bed")]
    assert client.get(f"{API}/runs/{2**63 - 1}").status_code == 404
    beyond = client.get(f"{API}/runs/{run['id']}/samples", params={"prompt_index": 2**64})
    assert beyond.status_code == 422 and beyond.json()["detail"][0]["loc"] == ["query", "prompt_index"]
