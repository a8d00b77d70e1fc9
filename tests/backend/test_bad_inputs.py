"""Bad inputs, all of them: each gets a 4xx whose answer names the field (a 422's `loc` or message, a 413's
message), and each leaves the database exactly as it was; on SQLite and on PostgreSQL. docs/reliability.md quotes
len(CASES)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from backend.settings import Settings
from tests.backend.stored import stored

REPO = Path(__file__).resolve().parents[2]
API = "/api/v1"


def many(n: int, make) -> list:
    return [make(i) for i in range(n)]


# (name, method, path, json body or query, expected status, the field the answer must name)
# {run} and {experiment} are the ids of an existing run (with its ingest token sent) and experiment.
CASES = [
    # config keys (the engine's schema)
    ("unknown key in an override", "POST", "/runs", {"overrides": ["nokey=1"]}, 422, "nokey"),
    ("misspelt nested key", "POST", "/runs", {"config": {"algorithm": {"adv_estimatr": "grpo"}}}, 422,
     "algorithm.adv_estimatr"),
    ("wrong type", "POST", "/runs", {"overrides": ["trainer.total_training_steps=abc"]}, 422,
     "trainer.total_training_steps"),
    ("out of range", "POST", "/runs", {"config": {"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": -1}}}},
     422, "actor_rollout_ref.actor.ppo_mini_batch_size"),
    ("not in the vocabulary", "POST", "/runs", {"overrides": ["algorithm.adv_estimator=nope"]}, 422,
     "algorithm.adv_estimator"),
    ("unknown logger", "POST", "/runs", {"overrides": ["trainer.logger=[console,nope]"]}, 422, "trainer.logger"),
    ("override without '='", "POST", "/runs", {"overrides": ["trainer.total_training_steps"]}, 422,
     "trainer.total_training_steps"),
    ("unknown preset / a path as preset", "POST", "/runs", {"preset": "../etc"}, 422, "preset"),
    ("bad key in a fork", "POST", "/runs/{run}/fork", {"overrides": ["nokey=1"]}, 422, "nokey"),
    ("bad key in a config check", "POST", "/config/validate", {"overrides": ["nokey=1"]}, 422, "nokey"),
    # data files (read on this machine by the server's own Ray head)
    ("missing train file", "POST", "/runs", {"overrides": ["data.train_files=/nonexistent/train.parquet"]}, 422,
     "data.train_files"),
    ("one missing file in a list", "POST", "/runs",
     {"config": {"data": {"val_files": ["builtin:arith/test.parquet", "no/such/test.parquet"]}}}, 422,
     "data.val_files"),
    ("data file name longer than the filesystem allows", "POST", "/runs",
     {"overrides": ["data.train_files=" + "x" * 5000]}, 422, "data.train_files"),
    ("unknown built-in data", "POST", "/runs", {"overrides": ["data.val_files=builtin:nope/test.parquet"]}, 422,
     "data.val_files"),
    # API payloads
    ("empty experiment name", "POST", "/experiments", {"name": ""}, 422, "name"),
    ("duplicate experiment name", "POST", "/experiments", {"name": "taken"}, 409, "name"),
    ("run name too long", "PATCH", "/runs/{run}", {"name": "x" * 201}, 422, "name"),
    ("empty tag", "POST", "/runs", {"tags": [""]}, 422, "tags"),
    ("experiment that does not exist", "POST", "/runs", {"experiment_id": 999_999}, 422, "experiment_id"),
    ("unknown sort field", "GET", "/runs", {"sort": "bogus"}, 422, "sort"),
    ("config filter without '='", "GET", "/runs", {"config": "algorithm.adv_estimator"}, 422, "config"),
    ("catastrophic key pattern", "GET", "/metrics", {"run_id": "{run}", "key_pattern": "(a+)+"}, 422,
     "key_pattern"),
    ("invalid key pattern", "GET", "/metrics", {"run_id": "{run}", "key_pattern": "("}, 422, "key_pattern"),
    ("metrics query without keys", "GET", "/metrics", {"run_id": "{run}"}, 422, "key"),
    ("samples order not a column", "GET", "/runs/{run}/samples", {"order": "prompt"}, 422, "order"),
    ("id beyond 64 bits", "GET", "/runs/{run}/samples/99999999999999999999", None, 422, "sample_id"),
    ("status the engine never reports", "POST", "/runs/{run}/status", {"status": "weird"}, 422, "status"),
    # uploads: huge or malformed batches
    ("too many metric points", "POST", "/runs/{run}/metrics",
     {"points": many(10_001, lambda i: {"key": "k", "step": i, "value": 1.0})}, 413, "points"),
    ("too many samples", "POST", "/runs/{run}/samples",
     {"samples": many(1_001, lambda i: {"step": 1, "sample_index": i})}, 413, "samples"),
    ("too many log lines", "POST", "/runs/{run}/logs", {"lines": many(5_001, lambda i: {"seq": i, "text": "x"})},
     413, "lines"),
    ("body over the byte limit", "POST", "/runs/{run}/metrics",
     {"points": [{"key": "k" * 300, "step": 1, "value": 1.0}] * 2_000}, 413, "body"),
    ("step not a number", "POST", "/runs/{run}/metrics", {"points": [{"key": "k", "step": "x", "value": 1}]}, 422,
     "step"),
    ("negative step", "POST", "/runs/{run}/metrics", {"points": [{"key": "k", "step": -1, "value": 1}]}, 422,
     "step"),
    ("empty metric key", "POST", "/runs/{run}/metrics", {"points": [{"key": "", "step": 1, "value": 1}]}, 422,
     "key"),
    ("true as a metric value", "POST", "/runs/{run}/metrics", {"points": [{"key": "k", "step": 1, "value": True}]},
     422, "value"),
    ("columns of different lengths", "POST", "/runs/{run}/metrics",
     {"series": [{"key": "k", "steps": [1, 2], "values": [1.0]}]}, 422, "series"),
    ("a good point after a bad one", "POST", "/runs/{run}/metrics",
     {"points": [{"key": "k", "step": 1, "value": 1.0}, {"key": "k", "step": 2, "value": "high"}]}, 422, "value"),
    ("sample split not train/val", "POST", "/runs/{run}/samples",
     {"samples": [{"step": 1, "sample_index": 0, "split": "test"}]}, 422, "split"),
    ("sample without its index", "POST", "/runs/{run}/samples", {"samples": [{"step": 1}]}, 422, "sample_index"),
    ("log line number not a number", "POST", "/runs/{run}/logs", {"lines": [{"seq": "a", "text": "x"}]}, 422,
     "seq"),
    ("truncated JSON", "POST", "/runs/{run}/metrics", b'{"points": [', 422, "body"),
    ("bytes that are not UTF-8", "POST", "/runs/{run}/samples", b'\xff\xfe{"samples": []}', 422, "body"),
]


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def api(tmp_path_factory, request):
    """One API per database (SQLite, and PostgreSQL: tests/backend/postgres.py) for every case."""
    data = tmp_path_factory.mktemp("bad-inputs")
    url = None
    if request.param == "postgresql":
        server = request.getfixturevalue("postgres")
        url = server.create_database(template=server.migrated)
        request.addfinalizer(lambda: server.drop_database(url))
    settings = Settings(data_dir=data, dispatch=False, frontend_dir=data / "no-ui", max_request_bytes=500_000,
                        database_url=url)
    with TestClient(create_app(settings)) as client:
        assert client.post(f"{API}/experiments", json={"name": "taken"}).status_code == 201
        run = client.post(f"{API}/runs", json={"name": "target", "launch": False}).json()
        token = {"Authorization": f"Bearer {run['ingest_token']}"}
        ok = client.post(f"{API}/runs/{run['id']}/metrics", headers=token,
                         json={"points": [{"key": "k", "step": 0, "value": 0.5}]})
        assert ok.status_code == 200
        yield client, run, token




def names(detail, field: str) -> bool:
    last = field.split(".")[-1]
    if isinstance(detail, str):
        return detail.startswith(f"{field}:") or f"{field}" in detail.split(";")[0].lower()
    for error in detail:
        loc = [str(part) for part in error.get("loc", [])]
        if error.get("field") == field or last in loc or field in error.get("msg", ""):
            return True
    return False


@pytest.mark.parametrize(("name", "method", "path", "payload", "status", "field"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(api, name, method, path, payload, status, field):
    client, run, token = api
    path = API + path.format(run=run["id"])
    before = stored(client)
    if method == "GET":
        query = {k: str(v).format(run=run["id"]) for k, v in (payload or {}).items()}
        response = client.get(path, params=query)
    elif isinstance(payload, bytes):
        response = client.request(method, path, content=payload, headers={**token, "content-type": "application/json"})
    else:
        response = client.request(method, path, content=json.dumps(payload), headers={
            **token, "content-type": "application/json"})
    assert response.status_code == status, f"{name}: {response.status_code} {response.text[:400]}"
    detail = response.json()["detail"]
    assert names(detail, field), f"{name}: the answer does not name {field!r}: {detail}"
    assert "Traceback" not in response.text
    assert stored(client) == before, f"{name}: the refused request changed the database"


def test_reliability_page_counts_these_cases():
    page = (REPO / "docs" / "reliability.md").read_text()
    assert f"**{len(CASES)} distinct bad inputs**" in page, len(CASES)
