"""The REST API on a real SQLite file (dispatch off: runs stay queued or are recorded as external); the tests that
read and write the database the most also on PostgreSQL (tests/backend/postgres.py). The rest: config, health, docs, the
UI and its files, feed pruning, 64-bit numbers and NUL characters; experiments and runs, metrics, samples and
logs are test_api_runs.py, test_api_metrics.py, test_api_samples_logs.py."""
from __future__ import annotations

import re

import pytest

from tests.backend.conftest import DATABASES, auth, external_run

API = "/api/v1"
ON_BOTH = pytest.mark.parametrize("database", DATABASES, indirect=True)


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
        # hashed build outputs are kept for good; the page that names them is asked for again each time
        assert c.get("/assets/app.js").headers["cache-control"] == "public, max-age=31536000, immutable"
        assert c.get("/").headers["cache-control"] == "no-cache"
        assert c.get("/compare?runs=1").headers["cache-control"] == "no-cache"
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
