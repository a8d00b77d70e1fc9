"""Concurrent writers on a real server (uvicorn's thread pool, the database's own locking), on SQLite and on
PostgreSQL. Clients send metrics, samples and log lines for two runs at once, every batch twice by two clients in
opposite orders (a resend while the first is still in flight); every request succeeds, every point, sample and line
is stored once, and a live SSE stream that read each run's feed while it was written got exactly the events a
replay from the start gets (none skipped: ids become visible in id order)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.backend.conftest import DATABASES, HTTP_TIMEOUT, SSEReader

RUNS, BATCHES, KEYS, STEPS, SAMPLES, LINES = 2, 6, 8, 25, 16, 40
VAL_KEY = "val-core/arith/reward/mean@1"  # a validation: each batch also tells the runs feed a held-out score


def metrics_body(batch: int) -> dict:
    steps = range(batch * STEPS, (batch + 1) * STEPS)
    points = [{"key": f"k{k}", "step": s, "value": k + s / 1000} for k in range(KEYS) for s in steps]
    points += [{"key": "training/global_step", "step": s, "value": s} for s in steps]
    points.append({"key": VAL_KEY, "step": steps[-1], "value": batch / 10})
    return {"points": points}


def samples_body(batch: int) -> dict:
    return {"samples": [{"step": batch, "sample_index": i, "prompt_index": i // 4, "prompt": f"p{i // 4}",
                         "response": f"r{batch}-{i}", "score": float(i % 2), "tokens": ["a", "b"],
                         "old_log_probs": [-0.5, -0.25]} for i in range(SAMPLES)]}


def logs_body(batch: int) -> dict:
    return {"lines": [{"seq": batch * LINES + i, "text": f"line {batch * LINES + i}"} for i in range(LINES)]}


def reversed_body(body: dict) -> dict:
    return {field: list(reversed(items)) for field, items in body.items()}


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_concurrent_ingest_stores_everything_once_and_the_feed_skips_nothing(server_factory, database):
    url = server_factory().start().url
    runs = []
    for n in range(RUNS):
        created = httpx.post(f"{url}/api/v1/runs", json={"name": f"w{n}", "launch": False}, timeout=HTTP_TIMEOUT)
        assert created.status_code == 201, created.text
        runs.append(created.json())
    live = {run["id"]: SSEReader(f"{url}/api/v1/runs/{run['id']}/events?last_event_id=0") for run in runs}

    requests = []
    for batch in range(BATCHES):
        for run in runs:
            for kind, body in (("metrics", metrics_body(batch)), ("samples", samples_body(batch)),
                               ("logs", logs_body(batch))):
                requests += [(run, kind, body), (run, kind, reversed_body(body))]

    def send(request) -> tuple[int, str]:
        run, kind, body = request
        response = httpx.post(f"{url}/api/v1/runs/{run['id']}/{kind}", json=body, timeout=HTTP_TIMEOUT,
                              headers={"Authorization": f"Bearer {run['ingest_token']}"})
        return response.status_code, response.text[:300]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(send, requests))
    assert [a for a in answers if a[0] != 200] == []

    for run in runs:  # the last event of each feed
        done = httpx.post(f"{url}/api/v1/runs/{run['id']}/status", json={"status": "succeeded"}, timeout=HTTP_TIMEOUT,
                          headers={"Authorization": f"Bearer {run['ingest_token']}"})
        assert done.status_code == 200, done.text

    def finished(event) -> bool:
        return event.get("event") == "status" and event["data"]["status"] == "succeeded"

    for run in runs:
        run_id = run["id"]
        metric_series = httpx.get(f"{url}/api/v1/runs/{run_id}/metrics", params={"max_points": 10_000},
                                  timeout=HTTP_TIMEOUT).json()["data"]
        assert {s["key"]: s["total_points"] for s in metric_series} == {
            **{f"k{k}": BATCHES * STEPS for k in range(KEYS)}, "training/global_step": BATCHES * STEPS,
            VAL_KEY: BATCHES}
        assert all(s["steps"] == sorted(set(s["steps"])) for s in metric_series)
        assert httpx.get(f"{url}/api/v1/runs/{run_id}/samples", timeout=HTTP_TIMEOUT).json()["count"] == \
            BATCHES * SAMPLES
        assert httpx.get(f"{url}/api/v1/runs/{run_id}/logs", timeout=HTTP_TIMEOUT).json()["count"] == BATCHES * LINES
        got = httpx.get(f"{url}/api/v1/runs/{run_id}", timeout=HTTP_TIMEOUT).json()
        assert got["status"] == "succeeded" and got["progress_step"] == BATCHES * STEPS - 1

        live[run_id].wait(finished)
        replay = SSEReader(f"{url}/api/v1/runs/{run_id}/events?last_event_id=0")
        replay.wait(finished)
        replay.close()
        live[run_id].close()
        seen = [(int(e["id"]), e["event"]) for e in live[run_id].events]
        everything = [(int(e["id"]), e["event"]) for e in replay.events]
        assert seen == everything  # the live stream skipped nothing
        kinds = [kind for _, kind in everything]
        assert [kinds.count(k) for k in ("metrics", "samples", "logs")] == [2 * BATCHES] * 3


@pytest.mark.postgresql
@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
def test_feed_ids_follow_commit_order(client):
    """The same, deterministic (PostgreSQL: SQLite has one writer at a time): a transaction that wrote its event
    and more before another one committed still commits its event after the other's."""
    from sqlmodel import Session, select

    from backend.models import Event
    from backend.services.events import add_event

    engine = client.app.state.engine
    with Session(engine) as first, Session(engine) as second:
        add_event(first, "order", "first", {})
        first.flush()  # its other writes go out before the second transaction starts
        add_event(second, "order", "second", {})
        second.commit()
        first.commit()
    with Session(engine) as session:
        kinds = session.exec(select(Event.kind).where(Event.channel == "order").order_by(Event.id)).all()
    assert kinds == ["second", "first"]
