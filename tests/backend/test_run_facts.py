"""A run's facts (issue 27): the fields of the engine's `started` status report are kept on the run (RunPublic.facts,
shown by the run page: device, the actor's and a critic's trainable vs total parameters); other reports leave them
alone."""
from __future__ import annotations

import pytest
from sqlmodel import Session, select

from backend.models import Event
from tests.backend.conftest import DATABASES, external_run


def status(client, run, status, **fields):
    response = client.post(f"/api/v1/runs/{run['id']}/status", json={"status": status, "fields": fields},
                           headers={"Authorization": f"Bearer {run['ingest_token']}"})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_started_report_is_kept_as_the_runs_facts(client):
    run = external_run(client, overrides=["actor_rollout_ref.model.lora_rank=8", "critic.model.lora_rank=8",
                                          "algorithm.adv_estimator=gae", "trainer.total_training_steps=3"])
    assert client.get(f"/api/v1/runs/{run['id']}").json()["facts"] == {}
    # engine/main_ppo.py's `started` fields (the run is already running: launch=false); a LoRA critic's counts too
    status(client, run, "started", workers=1, device="cpu", roles="actor+rollout+reference+critic", total_steps=3,
           launcher="in-process", device_name="cpu", n_params=1000, n_trainable_params=40, critic_n_params=1001,
           critic_n_trainable_params=41, placement=None)
    facts = client.get(f"/api/v1/runs/{run['id']}").json()["facts"]
    assert facts == {"workers": 1, "device": "cpu", "roles": "actor+rollout+reference+critic", "total_steps": 3,
                     "launcher": "in-process", "device_name": "cpu", "n_params": 1000, "n_trainable_params": 40,
                     "critic_n_params": 1001, "critic_n_trainable_params": 41, "placement": None}
    # the facts travel with the run's status event (a run page open takes them live)
    with Session(client.app.state.engine) as session:
        feed = [e.data for e in session.exec(select(Event).where(Event.channel == f"run:{run['id']}",
                                                                 Event.kind == "status"))]
    assert feed and feed[-1]["facts"] == facts
    # progress, heartbeats and the end do not touch them
    status(client, run, "running", step=1, total_steps=3, heartbeat={"phase": "gen", "step": 1, "time": 0.0})
    status(client, run, "succeeded", step=3)
    after = client.get(f"/api/v1/runs/{run['id']}").json()
    assert after["facts"] == facts and after["status"] == "succeeded"
    # the runs list carries them too
    listed = next(r for r in client.get("/api/v1/runs").json()["data"] if r["id"] == run["id"])
    assert listed["facts"]["n_trainable_params"] == 40 and listed["facts"]["critic_n_trainable_params"] == 41


def test_facts_leave_out_what_is_not_a_fact(client):
    run = external_run(client)
    status(client, run, "started", n_params=5, heartbeat={"phase": "gen"}, step=0, blob="x" * 30_000)
    assert client.get(f"/api/v1/runs/{run['id']}").json()["facts"] == {"n_params": 5}
    # a job that starts again (a requeued run) reports again: new values win, the rest stay
    status(client, run, "started", n_params=6, device="cuda")
    assert client.get(f"/api/v1/runs/{run['id']}").json()["facts"] == {"n_params": 6, "device": "cuda"}
