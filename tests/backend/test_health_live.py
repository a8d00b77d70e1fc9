"""Run health on a real uvicorn server: an alarm's change reaches the run's SSE stream (the GET's body), the runs
feed and the runs list, and the Python client; the sweep helper launches its members with the auto-stop rule. On
SQLite and PostgreSQL (the per-run state row is locked there, the per-prompt record is an upsert)."""
from __future__ import annotations

import httpx
import pytest

from backend.client import Client
from backend.client.sweep import stop_rule, sweep
from tests.backend.conftest import DATABASES, HTTP_TIMEOUT, SSEReader

ON_BOTH = pytest.mark.parametrize("database", DATABASES, indirect=True)


def post(url: str, run: dict, route: str, body: dict) -> None:
    r = httpx.post(f"{url}/api/v1/runs/{run['id']}/{route}", json=body, timeout=HTTP_TIMEOUT,
                   headers={"Authorization": f"Bearer {run['ingest_token']}"})
    assert r.status_code == 200, r.text


@ON_BOTH
def test_health_reaches_the_stream_the_runs_list_and_the_client(server_factory):
    server = server_factory().start()
    url = server.url
    client = Client(url)
    run = client.launch(["trainer.total_training_steps=50"], name="sick", launch=False).model_dump()
    runs_feed = SSEReader(f"{url}/api/v1/runs/events")
    feed = SSEReader(f"{url}/api/v1/runs/{run['id']}/events")
    for reader in (runs_feed, feed):
        reader.wait(lambda e: e.get("event") == "hello")
    for step in range(1, 9):  # KL over the band from step 3: kl-high fires at step 7, since step 3
        post(url, run, "metrics", {"series": [{"key": "actor/reward_kl_penalty", "steps": [step],
                                               "values": [0.0 if step < 3 else 0.5]}]})
    (event,) = feed.wait(lambda e: e.get("event") == "health")
    body = event["data"]
    assert body["run_id"] == run["id"] and body["status"] == "warning" and body["checked_step"] == 7
    (kl,) = body["alarms"]
    assert (kl["id"], kl["state"], kl["since_step"], kl["cleared_step"]) == ("kl-high", "firing", 3, None)
    assert kl["values"] == {"actor/reward_kl_penalty": 0.5} and body["thresholds"]["kl_high"] == 0.1
    got = httpx.get(f"{url}/api/v1/runs/{run['id']}/health", timeout=HTTP_TIMEOUT).json()
    assert got == {**body, "checked_step": 8}  # the GET: the same body (one more step judged since)

    (summary,) = runs_feed.wait(lambda e: e.get("event") == "health")
    firing = {"status": "warning", "firing": ["kl-high"], "alarms": [
        {"id": "kl-high", "severity": "warning", "title": "KL above 0.1", "since_step": 3}]}
    assert summary["data"] == {"id": run["id"], "health": firing}
    listed = httpx.get(f"{url}/api/v1/runs", timeout=HTTP_TIMEOUT).json()["data"]
    assert [r["health"] for r in listed] == [firing]

    judged = client.health(run["id"])
    assert judged.status == "warning" and [(a.id, a.state, a.since_step) for a in judged.alarms] == [
        ("kl-high", "firing", 3)]
    assert client.health(client.run(run["id"])).alarms[0].values == {"actor/reward_kl_penalty": 0.5}

    post(url, run, "metrics", {"series": [{"key": "actor/reward_kl_penalty", "steps": [9], "values": [0.05]}]})
    cleared = feed.wait(lambda e: e.get("event") == "health" and e["data"]["status"] == "ok")[0]["data"]
    assert cleared["alarms"][0]["state"] == "cleared" and cleared["alarms"][0]["cleared_step"] == 9
    runs_feed.wait(lambda e: e.get("event") == "health" and e["data"]["health"] == {"status": "ok", "firing": [],
                                                                                      "alarms": []})
    assert client.health(run["id"]).status == "ok"
    feed.close()
    runs_feed.close()


@ON_BOTH
def test_no_signal_prompts_and_auto_stop_on_answers(server_factory):
    """A GRPO run whose groups never vary: no-signal fires from its answers, the prompts are listed, and its
    auto-stop rule cancels it with the alarm as the reason."""
    server = server_factory().start()
    client = Client(server.url)
    run = client.launch(["trainer.health.stop_on=[no-signal]", "trainer.health.stop_after_steps=3"],
                        launch=False).model_dump()
    for step in range(1, 5):
        post(server.url, run, "samples", {"samples": [
            {"step": step, "sample_index": 2 * p + k, "prompt_index": p, "group_uid": f"{step}-{p}",
             "response": f"answer {p}", "score": 0.0} for p in range(3) for k in range(2)]})
    stopped = client.run(run["id"])
    assert stopped.status.value == "cancelled" and "no-signal" in stopped.error and "at step 3" in stopped.error
    listed = httpx.get(f"{server.url}/api/v1/runs/{run['id']}/health/no-signal", timeout=HTTP_TIMEOUT).json()
    assert [p["prompt_index"] for p in listed["data"]] == [0, 1, 2]
    # the run ended: its last step (4, whose answers came after the stop) joined the record too
    assert all(p["groups"] == 4 and p["last_step"] == 4 for p in listed["data"])


def test_sweep_launches_its_members_with_the_stop_rule(server_factory):
    """From Python (`sweep(..., stop_on=...)`) and from the shell (`--stop-on`, `--stop-after`); a bad alarm id
    launches nothing and names the key."""
    import subprocess
    import sys

    server = server_factory().start()
    client = Client(server.url)
    assert stop_rule([]) == []
    cli = [sys.executable, "-m", "backend.client", "--url", server.url, "sweep", "--experiment", "cli", "--no-wait",
           "actor_rollout_ref.actor.optim.lr=1e-4,3e-4", "trainer.total_training_steps=3"]
    done = subprocess.run([*cli, "--stop-on", "score-collapse", "--stop-on", "stalled", "--stop-after", "2"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    launched = client.runs(experiment="cli")
    assert len(launched) == 2 and all(r.resolved_config["trainer"]["health"] == {
        "stop_on": ["score-collapse", "stalled"], "stop_after_steps": 2} for r in launched)
    refused = subprocess.run([*cli, "--stop-on", "kl-hgh"], capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 2 and "trainer.health.stop_on" in refused.stderr
    assert len(client.runs(experiment="cli")) == 2  # nothing more launched
    for run in launched:
        client.cancel(run.id)
    runs = sweep(client, {"actor_rollout_ref.actor.optim.lr": ["1e-4", "3e-4"]}, experiment="guarded",
                 fixed=["trainer.total_training_steps=3"], stop_on=["kl-high", "nonfinite"], stop_after_steps=4)
    for run in runs:
        assert run.resolved_config["trainer"]["health"] == {"stop_on": ["kl-high", "nonfinite"],
                                                            "stop_after_steps": 4}
        client.cancel(run.id)
