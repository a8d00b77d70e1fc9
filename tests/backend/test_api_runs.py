"""The REST API on a real SQLite file (dispatch off: runs stay queued or are recorded as external); the tests that
read and write the database the most also on PostgreSQL (tests/backend/postgres.py). Experiments and runs: create,
validate, lifecycle, the runs list's filters, sorts, paging and held-out score."""
from __future__ import annotations

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
