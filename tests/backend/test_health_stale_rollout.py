"""The stale-rollout alarm (issue 27's "the update reached the rollout, every step"; issue 28's run health): the
engine's rollout/* freshness metrics, sent through the API step by step as the dashboard logger sends them, fire the
alarm at the first stale step with its numbers, clear it at the first fresh one, and reach GET /health, the runs
list, the run's SSE stream and the runs feed like every alarm."""
from __future__ import annotations

import httpx

from backend.services.health.thresholds import THRESHOLDS
from tests.backend.conftest import HTTP_TIMEOUT, SSEReader, external_run

API = "/api/v1"


def sync_metrics(stale: bool, gap: float | None = None, change: float = 0.4, params: int = 0) -> dict[str, float]:
    """One step's rollout/* metrics as engine/rollout/freshness.py logs them after the weight sync."""
    return {"rollout/weights_stale": float(stale), "rollout/weight_fingerprint_gap": gap if gap is not None else
            (change if stale else 0.0), "rollout/actor_weight_change": change,
            "rollout/stale_params": float(params if stale else 0), "timing_s/sync_weights": 0.3,
            "actor/pg_loss": 0.1}


def payload(step: int, values: dict[str, float]) -> dict:
    return {"series": [{"key": k, "steps": [step], "values": [v]} for k, v in values.items()]}


def send(client, run: dict, step: int, values: dict[str, float]) -> None:
    r = client.post(f"{API}/runs/{run['id']}/metrics", json=payload(step, values),
                    headers={"Authorization": f"Bearer {run['ingest_token']}"})
    assert r.status_code == 200, r.text


def stale_alarm(client, run: dict) -> dict | None:
    body = client.get(f"{API}/runs/{run['id']}/health").json()
    return next((a for a in body["alarms"] if a["id"] == "stale-rollout"), None)


def test_stale_rollout_fires_at_the_first_stale_step_with_its_numbers_and_clears(client):
    run = external_run(client, overrides=["trainer.total_training_steps=100"])
    plan = {1: sync_metrics(False), 2: sync_metrics(False), 3: sync_metrics(True, change=0.66, params=27),
            4: sync_metrics(True, gap=0.9, change=0.3, params=27), 5: sync_metrics(False), 6: sync_metrics(False)}
    seen = {}
    for step, values in plan.items():
        send(client, run, step, values)
        found = stale_alarm(client, run)
        seen[step] = found and found["state"]
        if step == 3:  # the first stale step: firing since it, with the numbers of that step
            assert found["severity"] == "error" and found["since_step"] == 3 and found["key"] == \
                "rollout/weight_fingerprint_gap"
            assert found["values"] == {"rollout/weight_fingerprint_gap": 0.66, "rollout/actor_weight_change": 0.66,
                                       "rollout/stale_params": 27.0, "rollout/weights_stale": 1.0}
            assert "27 parameters" in found["detail"] and "step 3" in found["detail"]
            assert found["samples"] == {"step": 3, "filter": None}
            listed = client.get(f"{API}/runs").json()["data"]
            assert [(r["health"]["status"], r["health"]["firing"]) for r in listed if r["id"] == run["id"]] == [
                ("error", ["stale-rollout"])]
    assert seen == {1: None, 2: None, 3: "firing", 4: "firing", 5: "cleared", 6: "cleared"}
    found = stale_alarm(client, run)
    assert found["since_step"] == 3 and found["cleared_step"] == 5
    body = client.get(f"{API}/runs/{run['id']}/health").json()
    assert body["status"] == "ok" and [a["id"] for a in body["alarms"]] == ["stale-rollout"]
    assert body["thresholds"]["stale_rollout_gap_max"] == THRESHOLDS["stale_rollout_gap_max"]


def test_a_gap_over_the_threshold_fires_without_the_engines_flag_and_fresh_syncs_raise_nothing(client):
    limit = THRESHOLDS["stale_rollout_gap_max"]
    fresh = external_run(client, overrides=["trainer.total_training_steps=100"])
    for step in range(1, 11):  # a correct sync: the gap is rounding at most, far under the threshold
        send(client, fresh, step, sync_metrics(False, gap=limit / 100))
    body = client.get(f"{API}/runs/{fresh['id']}/health").json()
    assert body["alarms"] == [] and body["checked_step"] == 10

    off = external_run(client, overrides=["trainer.total_training_steps=100"])
    send(client, off, 1, sync_metrics(False, gap=limit / 2))
    send(client, off, 2, sync_metrics(False, gap=limit * 2))  # not flagged, but further apart than any rounding
    found = stale_alarm(client, off)
    assert found["state"] == "firing" and found["since_step"] == 2
    send(client, off, 3, sync_metrics(False, gap="Infinity"))  # nothing compared (the logger sends inf so): stale
    send(client, off, 4, sync_metrics(False, gap=0.0))
    assert stale_alarm(client, off)["cleared_step"] == 4
    # the static decoder's check is per worker: the driver's mean is the share of stale workers (1 of 4 here)
    send(client, off, 5, {**sync_metrics(False, gap=limit / 10), "rollout/weights_stale": 0.25})
    assert stale_alarm(client, off)["state"] == "firing" and stale_alarm(client, off)["since_step"] == 5


def test_stale_rollout_reaches_the_run_stream_and_the_runs_feed(server_factory):
    server = server_factory().start()
    url = server.url
    r = httpx.post(f"{url}{API}/runs", json={"name": "stale", "launch": False,
                                             "overrides": ["trainer.total_training_steps=50"]}, timeout=HTTP_TIMEOUT)
    assert r.status_code == 201, r.text
    run = r.json()
    runs_feed, feed = SSEReader(f"{url}{API}/runs/events"), SSEReader(f"{url}{API}/runs/{run['id']}/events")
    for reader in (runs_feed, feed):
        reader.wait(lambda e: e.get("event") == "hello")

    def post(step, values):
        r = httpx.post(f"{url}{API}/runs/{run['id']}/metrics", json=payload(step, values), timeout=HTTP_TIMEOUT,
                       headers={"Authorization": f"Bearer {run['ingest_token']}"})
        assert r.status_code == 200, r.text

    post(1, sync_metrics(False))
    post(2, sync_metrics(True, change=0.5, params=3))
    (event,) = feed.wait(lambda e: e.get("event") == "health")
    (found,) = event["data"]["alarms"]
    assert (found["id"], found["state"], found["since_step"]) == ("stale-rollout", "firing", 2)
    assert event["data"]["status"] == "error" and found["values"]["rollout/weight_fingerprint_gap"] == 0.5
    (summary,) = runs_feed.wait(lambda e: e.get("event") == "health")
    assert summary["data"]["id"] == run["id"]
    assert (summary["data"]["health"]["status"], summary["data"]["health"]["firing"]) == ("error", ["stale-rollout"])
    post(3, sync_metrics(False))
    cleared = feed.wait(lambda e: e.get("event") == "health" and e["data"]["status"] == "ok")[0]["data"]
    assert cleared["alarms"][0]["state"] == "cleared" and cleared["alarms"][0]["cleared_step"] == 3
    runs_feed.wait(lambda e: e.get("event") == "health" and e["data"]["health"]["firing"] == [])
    feed.close()
    runs_feed.close()
