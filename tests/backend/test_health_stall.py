"""Run health on the server (issue 28), the stall check: a run that stops logging is stalled in the phase its
heartbeat named, judged on the server's own clock (planted old arrivals, an engine clock hours off)."""
from __future__ import annotations

import time

import pytest

from tests.backend.conftest import auth, external_run
from tests.backend.health_helpers import API, alarm, health, send


def arriving_at(monkeypatch, moment: float) -> None:
    """What the server receives from now on arrives at `moment` on its clock (the stall check's), as if sent then."""
    from backend.services.health import state

    monkeypatch.setattr(state, "clock", lambda: moment)


def test_stalled_run_names_its_phase_and_clears_on_the_next_step(client, monkeypatch):
    """Ten steps 10 s apart that arrived an hour ago (planted through the server's clock): judged against the
    clock at the next read, the run is stalled, in the phase its heartbeat named; a new step clears it."""
    run = external_run(client)
    start = time.time() - 3600
    for step in range(1, 11):
        arriving_at(monkeypatch, start + 10 * step)
        send(client, run, step, {"training/global_step": step}, wall_time=start + 10 * step)
    arriving_at(monkeypatch, start + 105)
    r = client.post(f"{API}/runs/{run['id']}/status", headers=auth(run), json={
        "status": "running", "fields": {"heartbeat": {"phase": "gen", "step": 11, "time": start + 105}}})
    assert r.status_code == 200
    monkeypatch.undo()  # the server's own clock again
    found = alarm(health(client, run), "stalled")
    assert found["state"] == "firing" and found["since_step"] == 10 and found["severity"] == "error"
    assert "gen" in found["title"] and "'gen'" in found["detail"]
    assert found["values"]["median_step_s"] == 10.0 and found["values"]["limit_s"] == 100.0
    assert found["values"]["idle_s"] > 3400
    send(client, run, 11, {"training/global_step": 11})  # wall time: now
    found = alarm(health(client, run), "stalled")
    assert found["state"] == "cleared" and found["cleared_step"] == 11


def test_a_phase_that_runs_far_past_its_usual_time_is_a_stall(client, monkeypatch):
    """Steps 10 s apart, generation usually 5 s (timing_s/gen): 70 s into the next step's generation, 75 s after
    the last step, the run is stalled in gen (the step rule alone waits 100 s from the last step)."""
    run = external_run(client)
    now = time.time()
    start = now - 175  # step 10 at now - 75
    for step in range(1, 11):
        arriving_at(monkeypatch, start + 10 * step)
        send(client, run, step, {"training/global_step": step, "timing_s/gen": 5.0}, wall_time=start + 10 * step)
    arriving_at(monkeypatch, now - 70)
    beat = {"status": "running", "fields": {"heartbeat": {"phase": "gen", "step": 11, "time": now - 70,
                                                          "detail": "rollout generating: step 11 on version 9"}}}
    assert client.post(f"{API}/runs/{run['id']}/status", headers=auth(run), json=beat).status_code == 200
    monkeypatch.undo()
    found = alarm(health(client, run), "stalled")
    assert found["state"] == "firing" and found["title"] == "Run stalled in gen"
    assert "The engine says: rollout generating: step 11 on version 9" in found["detail"]
    assert found["values"]["phase_median_s"] == 5.0 and found["values"]["phase_limit_s"] == 60.0
    assert "timing_s/gen" in found["detail"] and found["values"]["phase_s"] >= 70


@pytest.mark.parametrize("skew", [-7200.0, 7200.0])
def test_an_engine_clock_hours_off_neither_fakes_nor_hides_a_stall(client, monkeypatch, skew):
    """The engine's host clock is two hours behind (or ahead of) the server's. Its steps, 10 s apart by its clock,
    arrive as they are made: the run is moving, not stalled (behind, the old check saw two hours of silence). Its
    heartbeat says the phase began 30 s before it was sent, by its clock: the server counts the phase from the
    beat's arrival less those 30 s. 200 s after the last step arrived, the run is stalled (ahead, the old check
    would have waited two more hours)."""
    from backend.services import health

    run = external_run(client)
    server_start = time.time() - 1000
    for step in range(1, 11):
        arriving_at(monkeypatch, server_start + 10 * step)
        send(client, run, step, {"training/global_step": step, "timing_s/gen": 5.0},
             wall_time=server_start + skew + 10 * step)
    last = server_start + 100
    arriving_at(monkeypatch, last + 40)  # phase began (engine clock) at last + 10, sent at last + 40
    beat = {"phase": "gen", "step": 11, "time": last + skew + 10, "sent": last + skew + 40}
    assert client.post(f"{API}/runs/{run['id']}/status", headers=auth(run),
                       json={"status": "running", "fields": {"heartbeat": beat}}).status_code == 200
    monkeypatch.undo()
    from sqlmodel import Session

    from backend.models import Run

    with Session(client.app.state.engine) as session:
        record = session.get(Run, run["id"])
        assert health.refresh_stalled(session, record, now=last + 50) is None
        found = alarm(health.report(session, run["id"]), "stalled")
        assert found is None or found["state"] != "firing"  # 50 s after the last step, 40 s into gen: moving
        health.refresh_stalled(session, record, now=last + 75)  # 65 s into gen, its median 5 s: stalled in gen
        found = alarm(health.report(session, run["id"]), "stalled")
        assert found["state"] == "firing" and found["title"] == "Run stalled in gen"
        assert found["values"]["idle_s"] == 75.0 and found["values"]["phase_s"] == 65.0


def test_stall_is_judged_against_an_injected_clock():
    from backend.services.health import stall

    st: dict = {}
    for step in range(1, 6):
        stall.track(st, step, 1000.0 + 30 * step)
    assert stall.judge(st, 1150.0 + 299, None).steps == [(5, False)]  # 10 x 30 s = 300 s: not yet
    late = stall.judge(st, 1150.0 + 301, {"phase": "update_actor", "time": 1160.0})
    assert late.steps == [(5, True)]
    words = late.describe(5)
    assert "'update_actor'" in words.detail and words.values["phase_s"] == pytest.approx(291)
    # the async trainer's wait for its batch names what the rollout thread is doing (engine/trainer/heartbeat.py)
    waiting = stall.judge(st, 1150.0 + 301, {"phase": "wait_rollout", "time": 1160.0,
                                             "detail": "rollout generating: step 6 on version 4, for 290.0 s"})
    assert "The engine says: rollout generating: step 6 on version 4" in waiting.describe(5).detail
    assert stall.judge({}, 1e9, None) is None  # no step times yet: nothing to compare with
    stall.note_phases(st, {"timing_s/gen": [(4, 2.0), (5, 3.0)], "timing_s/reward": [(5, 1.0)]})
    stall.note_phases(st, {"timing_s/gen": [(6, 4.0)]})
    assert st["phases"] == {"gen": [2.0, 3.0, 4.0], "reward": [1.0]}
    beat = {"phase": "gen", "step": 6, "time": 1160.0}  # generating step 6 since 1160: 3 s is its median
    assert stall.judge(st, 1160.0 + 60, beat).steps == [(5, False)]  # 60 s: never sooner than stall_min_s
    assert stall.judge(st, 1160.0 + 61, beat).steps == [(5, True)]  # long before the step rule's 1450
    assert stall.judge(st, 1160.0 + 61, {**beat, "step": 5}).steps == [(5, False)]  # step 5 was logged: stale beat
    assert stall.judge(st, 1160.0 + 61, {**beat, "phase": "reward"}).steps == [(5, False)]  # 1 time: step rule
