"""Run health on the server (issue 28): the state survives a restart, an older server's alarms are judged by
today's rules at start, the auto-stop rule cancels a run with the alarm as the reason, the runs list names each
firing alarm, bad input is a 422 naming the field. The alarms themselves: test_health_metric_alarms.py,
test_health_answer_alarms.py, test_health_stall.py."""
from __future__ import annotations

from fastapi.testclient import TestClient

from backend.app import create_app
from tests.backend.conftest import auth, external_run
from tests.backend.health_helpers import API, NAN, alarm, health, send


def test_state_survives_a_restart(settings):
    """Three steps of a KL streak, a restart (a new app on the same SQLite file), two more: the streak went on
    (fires since step 3, as without the restart); the alarm is still there after a second restart."""
    with TestClient(create_app(settings)) as client:
        run = external_run(client)
        for step, kl in enumerate([0.0, 0.0, 0.5, 0.5, 0.5], start=1):
            send(client, run, step, {"actor/reward_kl_penalty": kl})
        assert health(client, run)["alarms"] == []
    with TestClient(create_app(settings)) as client:
        for step in (6, 7):
            send(client, run, step, {"actor/reward_kl_penalty": 0.5})
        found = alarm(health(client, run), "kl-high")
        assert found["state"] == "firing" and found["since_step"] == 3
    with TestClient(create_app(settings)) as client:
        body = health(client, run)
        assert body["status"] == "warning" and body["checked_step"] == 7
        send(client, run, 8, {"actor/reward_kl_penalty": 0.05})
        assert alarm(health(client, run), "kl-high")["cleared_step"] == 8


def age_step_one_state(settings, run_id: int, done: tuple[str, ...]) -> None:
    """Rewrite the run's step-one state as a server before issue 28's decision left it: judged once, done."""
    from sqlalchemy import text

    from backend import json_codec
    from backend.db import make_engine

    engine = make_engine(settings.db_url)
    value = ":d" if engine.dialect.name == "sqlite" else "CAST(:d AS JSON)"  # SQLite's JSON is text
    with engine.begin() as conn:
        data = conn.execute(text("SELECT data FROM health_state WHERE run_id = :r"), {"r": run_id}).scalar_one()
        data = data if isinstance(data, dict) else json_codec.loads(data)
        data["step-one"] = {name: True for name in done}
        conn.execute(text(f"UPDATE health_state SET data = {value} WHERE run_id = :r"),
                     {"d": json_codec.dumps(data), "r": run_id})
    engine.dispose()


def test_an_older_servers_step_one_alarms_are_judged_by_todays_rules_at_start(settings):
    """Runs judged before the step-one checks became setup findings kept step1-kl / step1-clip firing for good.
    A server starting on that database clears each at the step today's rule would have (the next step logging KL;
    the first step clipping in band), from the stored metrics; a running run with no such step yet is closed by
    the live check at its next step; an ended one with none keeps its finding."""
    one_batch = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    with TestClient(create_app(settings)) as client:
        ended = external_run(client, overrides=one_batch)
        running = external_run(client)
        alone = external_run(client)
        for run in (ended, running, alone):
            send(client, run, 1, {"actor/reward_kl_penalty": 0.5, "actor/pg_clipfrac": 0.3})
        assert alarm(health(client, ended), "step1-clip")["state"] == "firing"
        client.post(f"{API}/runs/{alone['id']}/status", json={"status": "succeeded"}, headers=auth(alone))
    quiet = settings.model_copy(update={"health_checks": False})
    with TestClient(create_app(quiet)) as client:  # what the old server stored after step 1, judged by it no more
        for step, clip in ((2, 0.2), (3, 0.0)):
            send(client, ended, step, {"actor/reward_kl_penalty": 0.4, "actor/pg_clipfrac": clip})
        client.post(f"{API}/runs/{ended['id']}/status", json={"status": "succeeded"}, headers=auth(ended))
    for run in (ended, running, alone):
        age_step_one_state(settings, run["id"], ("kl_done", "clip_done"))

    with TestClient(create_app(settings)) as client:  # the repair runs as the server starts
        found = {r["id"]: {a["id"]: a for a in health(client, r)["alarms"]} for r in (ended, running, alone)}
        assert (found[ended["id"]]["step1-kl"]["state"], found[ended["id"]]["step1-kl"]["cleared_step"]) == ("cleared", 2)
        assert (found[ended["id"]]["step1-clip"]["state"], found[ended["id"]]["step1-clip"]["cleared_step"]) == (
            "cleared", 3)  # step 2 still clipped
        assert found[running["id"]]["step1-kl"]["state"] == "firing"  # no later step yet: left to the live check
        assert found[alone["id"]]["step1-kl"]["state"] == "firing"  # ended at step 1: the finding stays
        listed = {r["id"]: r["health"]["firing"] for r in client.get(f"{API}/runs").json()["data"]}
        assert listed[ended["id"]] == []  # no Runs badge left
        send(client, running, 2, {"actor/reward_kl_penalty": 0.4})
        assert alarm(health(client, running), "step1-kl")["cleared_step"] == 2
    with TestClient(create_app(settings)) as client:  # once repaired, a later start changes nothing
        assert alarm(health(client, ended), "step1-kl")["cleared_step"] == 2
        assert alarm(health(client, alone), "step1-kl")["state"] == "firing"


# ------------------------------------------------------------------------------------------------ auto-stop
def test_auto_stop_cancels_a_kl_blow_up_with_the_alarm_as_reason(client):
    sick = external_run(client, overrides=["trainer.health.stop_on=[kl-high]", "trainer.health.stop_after_steps=7"])
    well = external_run(client)  # no rule: the same blow-up only warns
    for step in range(1, 13):
        kl = 0.0 if step < 3 else 10.0 ** (step - 3)
        for run in (sick, well):
            send(client, run, step, {"actor/reward_kl_penalty": kl, "training/global_step": step})
        if step == 8:
            assert client.get(f"{API}/runs/{sick['id']}").json()["status"] == "running"  # fired at 7, held 6 steps
    stopped = client.get(f"{API}/runs/{sick['id']}").json()
    assert stopped["status"] == "cancelled"
    assert "kl-high" in stopped["error"] and "since step 3" in stopped["error"] and "at step 9" in stopped["error"]
    assert client.get(f"{API}/runs/{well['id']}").json()["status"] == "running"
    assert alarm(health(client, well), "kl-high")["state"] == "firing"


def test_auto_stop_rule_is_checked_at_launch(client):
    r = client.post(f"{API}/runs", json={"launch": False, "overrides": ["trainer.health.stop_on=[kl-hgh]"]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "trainer.health.stop_on"
    r = client.post(f"{API}/runs", json={"launch": False, "overrides": ["trainer.health.stop_after_steps=0"]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "trainer.health.stop_after_steps"
    default = external_run(client)["resolved_config"]["trainer"]["health"]
    assert default == {"stop_on": [], "stop_after_steps": 1}  # off by default


def test_runs_list_summary_names_each_firing_alarm_with_its_severity(client):
    """A warning and an error at once: the run is `error`, each alarm comes with its own severity (errors first)."""
    run = external_run(client)
    other = external_run(client)
    for step in range(1, 8):
        send(client, run, step, {"actor/reward_kl_penalty": 0.0 if step < 3 else 0.5,
                                 "actor/pg_loss": NAN if step == 6 else 0.1})
    listed = {r["id"]: r["health"] for r in client.get(f"{API}/runs").json()["data"]}
    assert listed[other["id"]] == {"status": "ok", "firing": [], "alarms": []}
    assert listed[run["id"]] == {"status": "error", "firing": ["nonfinite:actor/pg_loss", "kl-high"], "alarms": [
        {"id": "nonfinite:actor/pg_loss", "severity": "error", "title": "NaN in actor/pg_loss", "since_step": 6},
        {"id": "kl-high", "severity": "warning", "title": "KL above 0.1", "since_step": 3}]}


# ------------------------------------------------------------------------------------------------ the API
def test_bad_input_and_unknown_runs(client):
    assert client.get(f"{API}/runs/999/health").status_code == 404
    assert client.get(f"{API}/runs/999/health/no-signal").status_code == 404
    r = client.get(f"{API}/runs/abc/health")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "run_id"]
    run = external_run(client)
    r = client.get(f"{API}/runs/{run['id']}/health/no-signal", params={"limit": 0})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "limit"]
    body = health(client, run)
    assert body == {"run_id": run["id"], "status": "ok", "checked_step": None, "alarms": [],
                    "thresholds": body["thresholds"]}
    from backend.services.health.thresholds import THRESHOLDS

    assert body["thresholds"] == THRESHOLDS
