"""Webhooks (issue 35): an experiment's or a run's subscription is told, off the request path, when a health alarm
fires or clears and when a run ends, fails, is cancelled or stalls; in the Slack-compatible form (`{"text"}`) or as
plain JSON (with the token as a bearer header); failed deliveries are retried with backoff a bounded number of times;
each run's delivery log is in the API; the URL's secret parts and the token are never answered. A real receiver
(`http.server` on 127.0.0.1), the app on a real SQLite file; every wait is for a state (the delivery log's)."""
from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from backend.app import create_app
from backend.services.webhooks.masking import mask_url, scrub, token_hint
from tests.backend.conftest import DATABASES, external_run
from tests.backend.webhook_receiver import Receiver
from tests.waiting import wait_for

API = "/api/v1"
SECRET_PATH = "/services/T0001/B0002/XyZsecretPathPart123"
TOKEN = "tok-3f9a8b7c6d5e4f3a2b1c"


@pytest.fixture
def app_client(settings):
    settings.webhook_backoff_s = 0.05  # retries come quickly; the test waits for the states, not for a time
    settings.webhook_attempts = 3
    with TestClient(create_app(settings)) as client:
        yield client


def deliveries(client, run_id: int) -> list[dict]:
    response = client.get(f"{API}/runs/{run_id}/webhook-deliveries")
    assert response.status_code == 200, response.text
    return response.json()["data"]


def settled(client, run_id: int, n: int) -> list[dict]:
    """The run's deliveries once there are `n` and none is waiting to be sent (a hang guard, not a timer)."""
    def done():
        rows = deliveries(client, run_id)
        return rows if len(rows) == n and all(d["state"] in ("delivered", "failed") for d in rows) else None

    return wait_for(done, 60, 0.05, f"{n} deliveries of run {run_id} settled")


def send_metric(client, run, step: int, values: dict[str, float]) -> None:
    response = client.post(f"{API}/runs/{run['id']}/metrics", headers={"Authorization": f"Bearer {run['ingest_token']}"},
                           json={"points": [{"key": k, "step": step, "value": v} for k, v in values.items()]})
    assert response.status_code == 200, response.text


def no_secret(text: str) -> None:
    assert "XyZsecretPathPart123" not in text and "B0002" not in text and TOKEN not in text, text[:500]


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_alarm_fired_and_cleared_and_the_runs_end_reach_both_forms(app_client):
    client = app_client
    with Receiver() as receiver:
        experiment = client.post(f"{API}/experiments", json={"name": "hooks"}).json()
        run = external_run(client, experiment_id=experiment["id"], name="watched")
        plain = client.post(f"{API}/experiments/{experiment['id']}/webhooks", json={
            "url": receiver.url + "/plain?key=" + TOKEN, "format": "json", "token": TOKEN, "name": "team"})
        assert plain.status_code == 201, plain.text
        slack = client.post(f"{API}/runs/{run['id']}/webhooks", json={"url": receiver.url + SECRET_PATH,
                                                                       "format": "slack"})
        assert slack.status_code == 201, slack.text
        for response in (plain, slack, client.get(f"{API}/webhooks"), client.get(f"{API}/runs/{run['id']}/webhooks"),
                         client.get(f"{API}/webhooks/{plain.json()['id']}")):
            no_secret(response.text)
        assert plain.json()["has_token"] and plain.json()["token_hint"] == "…" + TOKEN[-4:]
        assert slack.json()["url_masked"] == f"{receiver.url}/…t123"
        assert client.get(f"{API}/runs/{run['id']}/webhooks").json()["count"] == 2

        send_metric(client, run, 1, {"actor/rollout_log_probs_absdiff": 0.5})  # rollout-mismatch fires
        send_metric(client, run, 2, {"actor/rollout_log_probs_absdiff": 0.0})  # and clears
        ended = client.post(f"{API}/runs/{run['id']}/status", headers={"Authorization": f"Bearer {run['ingest_token']}"},
                            json={"status": "failed", "error": "CUDA out of memory\nTraceback ..."})
        assert ended.status_code == 200

        log = settled(client, run["id"], 6)  # 3 events x 2 webhooks
        assert {d["state"] for d in log} == {"delivered"} and {d["attempts"] for d in log} == {1}
        assert sorted(d["event"] for d in log) == sorted(["alarm.fired", "alarm.cleared", "run.failed"] * 2)
        no_secret(client.get(f"{API}/runs/{run['id']}/webhook-deliveries").text)

        bodies = receiver.bodies("/plain?key=" + TOKEN)
        assert [b["event"] for b in bodies] == ["alarm.fired", "alarm.cleared", "run.failed"]
        fired, cleared, failed = bodies
        assert fired["alarm"]["id"] == "rollout-mismatch" and fired["alarm"]["severity"] == "error"
        assert fired["alarm"]["since_step"] == 1 and cleared["alarm"]["cleared_step"] == 2
        assert fired["run"]["id"] == run["id"] and fired["run"]["experiment"] == "hooks"
        assert fired["url"].endswith(f"/runs/{run['id']}")
        assert failed["run"]["status"] == "failed" and "CUDA out of memory" in failed["text"]
        plain_requests = [r for r in receiver.requests if r["path"].startswith("/plain")]
        assert all(r["headers"]["Authorization"] == f"Bearer {TOKEN}" for r in plain_requests)

        texts = receiver.bodies(SECRET_PATH)
        assert all(set(b) == {"text"} for b in texts), texts  # Slack's incoming-webhook form
        assert "rollout" in texts[0]["text"].lower() and f"Run {run['id']}" in texts[0]["text"]
        assert "cleared at step 2" in texts[1]["text"] and "failed" in texts[2]["text"]
        assert f"/runs/{run['id']}|Open the run>" in texts[0]["text"]
        slack_requests = [r for r in receiver.requests if r["path"] == SECRET_PATH]
        assert all("Authorization" not in r["headers"] for r in slack_requests)


def test_failed_deliveries_are_retried_with_backoff_then_given_up(app_client):
    client = app_client
    dead = Receiver()  # a port that was open and is closed: connection refused
    dead_url = dead.url + "/gone"
    dead.server.server_close()
    with Receiver([503, 503, 200]) as flaky, Receiver([500]) as broken, Receiver([404]) as refusing:
        run = external_run(client)
        for url in (flaky.url + "/hook", broken.url + "/hook", refusing.url + "/hook", dead_url):
            response = client.post(f"{API}/runs/{run['id']}/webhooks", json={"url": url, "events": ["run.cancelled"]})
            assert response.status_code == 201, response.text
        assert client.post(f"{API}/runs/{run['id']}/cancel").status_code == 200
        log = {d["url_masked"]: d for d in settled(client, run["id"], 4)}
    flaky_log, broken_log = log[flaky.url + "/…"], log[broken.url + "/…"]
    assert flaky_log["state"] == "delivered" and flaky_log["attempts"] == 3 and flaky_log["last_status"] == 200
    assert [r["answered"] for r in flaky.requests] == [503, 503, 200]
    assert broken_log["state"] == "failed" and broken_log["attempts"] == 3  # webhook_attempts: bounded
    assert broken_log["last_status"] == 500 and "HTTP 500" in broken_log["last_error"]
    assert len(broken.requests) == 3
    refused = log[refusing.url + "/…"]
    assert refused["state"] == "failed" and refused["attempts"] == 1 and "not retried" in refused["last_error"]
    unreachable = log[dead.url + "/…"]
    assert unreachable["state"] == "failed" and unreachable["attempts"] == 3 and unreachable["last_status"] is None
    assert "Connect" in unreachable["last_error"]
    assert all(b["event"] == "run.cancelled" for b in flaky.bodies("/hook"))


def test_a_stall_is_sent_as_run_stalled(app_client):
    """The health alarm `stalled` firing is the event `run.stalled` (judged against a clock far ahead: the run
    logged its steps and then nothing)."""
    from backend.models import Run
    from backend.services import health

    client = app_client
    with Receiver() as receiver:
        run = external_run(client)
        hook = client.post(f"{API}/runs/{run['id']}/webhooks", json={"url": receiver.url + "/stall",
                                                                      "events": ["run.stalled"]})
        assert hook.status_code == 201
        for step in range(1, 6):
            send_metric(client, run, step, {"training/global_step": step})
        with Session(client.app.state.engine, expire_on_commit=False) as session:
            health.refresh_stalled(session, session.get(Run, run["id"]), now=time.time() + 100_000)
        (delivery,) = settled(client, run["id"], 1)
        assert delivery["event"] == "run.stalled" and delivery["state"] == "delivered"
        (body,) = receiver.bodies("/stall")
        assert body["alarm"]["id"] == "stalled" and "stalled" in body["text"]


def test_bad_subscriptions_are_refused_naming_the_field_and_edits_keep_secrets(app_client):
    client = app_client
    run = external_run(client)
    url = f"{API}/runs/{run['id']}/webhooks"
    for body, field in (({"url": "ftp://example.org/x"}, "url"), ({"url": "not a url at all"}, "url"),
                        ({"url": "http://127.0.0.1:9/x", "events": ["run.exploded"]}, "events"),
                        ({"url": "http://127.0.0.1:9/x", "events": []}, "events"),
                        ({"url": "http://127.0.0.1:9/x", "format": "teams"}, "format")):
        response = client.post(url, json=body)
        assert response.status_code == 422, (body, response.text)
        assert field in response.json()["detail"][0]["loc"], response.text
    assert client.post(f"{API}/runs/999999/webhooks", json={"url": "http://127.0.0.1:9/x"}).status_code == 404
    assert client.post(f"{API}/experiments/999999/webhooks", json={"url": "http://127.0.0.1:9/x"}).status_code == 404
    hook = client.post(url, json={"url": "http://127.0.0.1:9" + SECRET_PATH, "token": TOKEN}).json()
    edited = client.patch(f"{API}/webhooks/{hook['id']}", json={"enabled": False, "events": ["run.failed"]})
    assert edited.status_code == 200 and edited.json()["enabled"] is False and edited.json()["has_token"]
    no_secret(edited.text)
    removed = client.patch(f"{API}/webhooks/{hook['id']}", json={"token": ""}).json()
    assert removed["has_token"] is False and removed["token_hint"] is None
    assert client.delete(f"{API}/webhooks/{hook['id']}").status_code == 204
    assert client.get(f"{API}/webhooks/{hook['id']}").status_code == 404
    # a deleted experiment takes its webhooks with it
    experiment = client.post(f"{API}/experiments", json={"name": "gone"}).json()
    client.post(f"{API}/experiments/{experiment['id']}/webhooks", json={"url": "http://127.0.0.1:9/x"})
    assert client.delete(f"{API}/experiments/{experiment['id']}").status_code == 204
    assert client.get(f"{API}/webhooks", params={"experiment_id": experiment["id"]}).json()["count"] == 0


def test_masking():
    assert mask_url("https://hooks.slack.com/services/T0/B0/abcdefghijkl") == "https://hooks.slack.com/…ijkl"
    assert mask_url("https://user:pw@example.org:8443/short") == "https://example.org:8443/…"
    assert mask_url("http://example.org/") == "http://example.org"
    assert mask_url("http://example.org:99999/x") == "(hidden)"
    assert token_hint("short") is None and token_hint(TOKEN) == "…" + TOKEN[-4:]
    error = "ConnectError: http://h/services/T0/B0/abcdefghijkl?token=zz failed " + TOKEN
    assert scrub(error, "http://h/services/T0/B0/abcdefghijkl?token=zz", TOKEN) == "ConnectError: *** failed ***"
