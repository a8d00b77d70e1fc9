"""SSE on a real uvicorn server: a point arrives <= 1 s after ingest; Last-Event-ID resumes with no gap."""
from __future__ import annotations

import time

import httpx

from tests.backend.conftest import HTTP_TIMEOUT, SSEReader


def make_run(url: str) -> dict:
    r = httpx.post(f"{url}/api/v1/runs", json={"name": "live", "launch": False}, timeout=HTTP_TIMEOUT)
    assert r.status_code == 201, r.text
    return r.json()


def post_points(url, run, steps, key="critic/score/mean"):
    r = httpx.post(f"{url}/api/v1/runs/{run['id']}/metrics", timeout=HTTP_TIMEOUT,
                   headers={"Authorization": f"Bearer {run['ingest_token']}"},
                   json={"points": [{"key": key, "step": s, "value": s / 10} for s in steps]})
    assert r.status_code == 200, r.text
    return time.time()


def metric_steps(events):
    return [p[1] for e in events if e.get("event") == "metrics" for p in e["data"]["points"]]


def test_sse_delivery_and_resume(server_factory):
    server = server_factory().start()
    url = server.url
    runs_feed = SSEReader(f"{url}/api/v1/runs/events")
    runs_feed.wait(lambda e: e.get("event") == "hello")
    run = make_run(url)
    runs_feed.wait(lambda e: e["data"].get("id") == run["id"] and e["data"].get("status") == "running")

    feed = SSEReader(f"{url}/api/v1/runs/{run['id']}/events")
    feed.wait(lambda e: e.get("event") == "hello")
    latencies = []
    for step in range(10):
        sent = post_points(url, run, [step])
        got = feed.wait(lambda e, s=step: e.get("event") == "metrics" and e["data"]["points"][0][1] == s)
        latencies.append(got[0]["at"] - sent)
    assert max(latencies) <= 1.0, latencies
    ids = [int(e["id"]) for e in feed.events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    last_seen = int(feed.events[-1]["id"])
    feed.close()

    # while nobody listens: more points, a log line and a status change
    post_points(url, run, range(10, 20))
    httpx.post(f"{url}/api/v1/runs/{run['id']}/logs", json={"lines": [{"seq": 0, "text": "hello"}]},
               headers={"Authorization": f"Bearer {run['ingest_token']}"}, timeout=HTTP_TIMEOUT)
    httpx.post(f"{url}/api/v1/runs/{run['id']}/status", json={"status": "succeeded"},
               headers={"Authorization": f"Bearer {run['ingest_token']}"}, timeout=HTTP_TIMEOUT)

    resumed = SSEReader(f"{url}/api/v1/runs/{run['id']}/events", headers={"Last-Event-ID": str(last_seen)})
    resumed.wait(lambda e: e.get("event") == "status" and e["data"]["status"] == "succeeded")
    assert metric_steps(resumed.events) == list(range(10, 20))  # exactly the missed ones, in order
    assert [e["data"]["lines"][0][1] for e in resumed.events if e["event"] == "logs"] == ["hello"]
    assert all(int(e["id"]) > last_seen for e in resumed.events)
    resumed.close()

    # the same through ?last_event_id=, from the very start: everything the run ever emitted
    replay = SSEReader(f"{url}/api/v1/runs/{run['id']}/events?last_event_id=0")
    replay.wait(lambda e: e.get("event") == "status" and e["data"]["status"] == "succeeded")
    assert metric_steps(replay.events) == list(range(20))
    replay.close()
    runs_feed.wait(lambda e: e["data"].get("id") == run["id"] and e["data"].get("status") == "succeeded")
    runs_feed.close()
    assert httpx.get(f"{url}/api/v1/runs/999/events", timeout=HTTP_TIMEOUT).status_code == 404
