"""Security: API token on every /api route, per-run ingest tokens, CORS off, no secrets in responses/logs."""
from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from backend.app import create_app
from backend.server.middleware import RedactTokens

API = "/api/v1"
TOKEN = "s3cret-api-token"


@pytest.fixture
def secured(settings):
    settings.api_token = SecretStr(TOKEN)
    with TestClient(create_app(settings)) as c:
        yield c


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def test_auth_off_everything_open(client):
    assert client.get(f"{API}/runs").status_code == 200
    assert client.post(f"{API}/experiments", json={"name": "e"}).status_code == 201


def test_auth_on(secured):
    c = secured
    openapi = c.get("/openapi.json").json()
    gets = [p for p, ops in openapi["paths"].items() if "get" in ops and "{" not in p and not p.endswith("/events")]
    assert len(gets) >= 5
    for path in gets:
        missing = c.get(path, params={"run_id": 1, "key": "k", "prompt_index": 0})
        assert missing.status_code == 401, path
        assert c.get(path, headers=bearer("wrong"), params={"run_id": 1, "key": "k",
                                                            "prompt_index": 0}).status_code == 403, path
    assert c.get(f"{API}/runs", headers=bearer(TOKEN)).status_code == 200
    assert c.get("/healthz").status_code == 200  # container liveness stays open, and says nothing secret

    created = c.post(f"{API}/runs", json={"launch": False}, headers=bearer(TOKEN)).json()
    other = c.post(f"{API}/runs", json={"launch": False}, headers=bearer(TOKEN)).json()
    token = created["ingest_token"]
    assert token and token not in c.get(f"{API}/runs/{created['id']}", headers=bearer(TOKEN)).text
    assert "ingest_token" not in c.get(f"{API}/runs", headers=bearer(TOKEN)).json()["data"][0]
    point = {"points": [{"key": "k", "step": 1, "value": 1.0}]}
    assert c.post(f"{API}/runs/{created['id']}/metrics", json=point).status_code == 401
    assert c.post(f"{API}/runs/{created['id']}/metrics", json=point, headers=bearer(token)).status_code == 200
    # a run writes only to itself
    assert c.post(f"{API}/runs/{other['id']}/metrics", json=point, headers=bearer(token)).status_code == 403
    assert c.post(f"{API}/runs/{other['id']}/status", json={"status": "failed"},
                  headers=bearer(token)).status_code == 403
    # an ingest token is not an API token
    assert c.get(f"{API}/runs", headers=bearer(token)).status_code == 403
    assert c.delete(f"{API}/runs/{created['id']}", headers=bearer(token)).status_code == 403
    # the API token may ingest too (tools, backfills)
    assert c.post(f"{API}/runs/{other['id']}/metrics", json=point, headers=bearer(TOKEN)).status_code == 200
    # SSE takes ?access_token= (EventSource cannot send headers): a wrong one is refused before streaming
    assert c.get(f"{API}/runs/events", params={"access_token": "nope"}).status_code == 403


def test_ingest_token_checked_even_with_auth_off(client):
    a = client.post(f"{API}/runs", json={"launch": False}).json()
    b = client.post(f"{API}/runs", json={"launch": False}).json()
    point = {"points": [{"key": "k", "step": 1, "value": 1.0}]}
    assert client.post(f"{API}/runs/{b['id']}/metrics", json=point, headers=bearer(a["ingest_token"])
                       ).status_code == 403


def test_cors_off_by_default(client):
    r = client.options(f"{API}/runs", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "GET"})
    assert "access-control-allow-origin" not in r.headers
    r = client.get(f"{API}/runs", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers


def test_cors_when_configured(settings):
    settings.cors_origins = ["http://localhost:5173"]
    with TestClient(create_app(settings)) as c:
        r = c.get(f"{API}/runs", headers={"Origin": "http://localhost:5173"})
        assert r.headers["access-control-allow-origin"] == "http://localhost:5173"


def test_secrets_not_in_responses_or_logs(secured, settings):
    health = secured.get(f"{API}/health", headers=bearer(TOKEN)).text
    assert TOKEN not in health
    record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1", "GET", f"/api/v1/runs/events?access_token={TOKEN}&x=1", "1.1", 200),
                               None)
    RedactTokens().filter(record)
    assert TOKEN not in record.getMessage() and "access_token=***" in record.getMessage()
    assert TOKEN not in repr(settings) and TOKEN not in settings.model_dump_json()
