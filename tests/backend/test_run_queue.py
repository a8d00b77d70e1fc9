"""GET /runs/{id}/queue (issue 35): a queued run says why it waits: its place, the runs ahead of it, the runs holding
the concurrency limit, and whether this server launches runs at all. On a real SQLite file."""
from __future__ import annotations

from sqlmodel import Session

from backend.models import Run
from backend.services.dispatch import queue


def _queued(client, name: str) -> dict:
    response = client.post("/api/v1/runs", json={"name": name, "overrides": ["trainer.total_training_steps=3"],
                                                 "launch": True})
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "queued"
    return response.json()


def test_a_queued_run_says_why_it_waits(client):
    first, second, third = (_queued(client, n) for n in ("first", "second", "third"))
    # the first one trains (its engine reported it running): it holds the one slot
    assert client.post(f"/api/v1/runs/{first['id']}/status", json={"status": "running"}).status_code == 200

    body = client.get(f"/api/v1/runs/{third['id']}/queue").json()
    assert body["waiting"] and body["status"] == "queued"
    assert body["position"] == 2
    assert [r["id"] for r in body["ahead"]] == [second["id"]]
    assert [(r["id"], r["status"]) for r in body["in_flight"]] == [(first["id"], "running")]
    assert body["max_concurrent_runs"] == 1
    assert body["dispatch"] is False  # the test server launches nothing: it says so
    assert body["reason"].startswith(f"2nd in the queue, after run {second['id']} (second).")
    assert "RLSTUDIO_DISPATCH=false" in body["reason"]

    running = client.get(f"/api/v1/runs/{first['id']}/queue").json()
    assert running["waiting"] is False and running["position"] is None and running["reason"] is None
    assert client.get("/api/v1/runs/999999/queue").status_code == 404


def test_the_reason_names_the_limit_and_the_run_holding_it(client):
    """On a dispatching server (the service as the route calls it there): the limit, the run that holds it, then a
    free slot."""
    first, second = _queued(client, "holder"), _queued(client, "waiter")
    client.post(f"/api/v1/runs/{first['id']}/status", json={"status": "running"})
    engine = client.app.state.engine
    with Session(engine) as session:
        waiter = session.get(Run, second["id"])
        held = queue.explain(session, waiter, max_concurrent=1, dispatch=True)
        assert held.reason == (f"1st in the queue: waiting for a free slot. The limit of 1 run at a time "
                               f"(RLSTUDIO_MAX_CONCURRENT_RUNS) is taken by run {first['id']} (holder); it starts "
                               "when that run ends.")
        free = queue.explain(session, waiter, max_concurrent=2, dispatch=True)
        assert free.position == 1 and "a slot is free" in free.reason
    with Session(engine) as session:  # submitted: the dispatcher's own write (no route sets it)
        waiter = session.get(Run, second["id"])
        waiter.status = "starting"
        session.add(waiter)
        session.commit()
        starting = queue.explain(session, session.get(Run, second["id"]), max_concurrent=1, dispatch=True)
        assert starting.waiting and starting.position is None and "waiting for Ray" in starting.reason
