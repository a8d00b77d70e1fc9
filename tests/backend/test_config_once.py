"""The run config is resolved once: one key followed from the New run form's request to the worker's config.

The server resolves the config when the run is created, writes it (with the keys it sets on a launch) into the
run's directory, and the job's command line reads that file as it is: the worker gets the value the server
checked and shows, and the engine's resolve() runs once on the whole way. Real parts: the API on a real SQLite
file, the dispatcher's own job command, the job's own argument handling, and the real worker in this process. A resume continues from its parent's
resolved config, also without resolving it again."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from sqlmodel import Session

import engine.config.resolve as resolve_module
from backend.models import Run
from backend.services.dispatch import job_command
from tests.backend.conftest import REPO

API = "/api/v1"


def count_resolves(monkeypatch, counted) -> None:
    """Puts `counted` in place of resolve() in every module that holds the function by name (loader.py imports
    it at the top), not only in its own module: a call through any of them is counted."""
    real_resolve = resolve_module.resolve
    holders = [m for name, m in list(sys.modules.items())
               if name.startswith("engine.") and getattr(m, "resolve", None) is real_resolve]
    assert resolve_module in holders and len(holders) > 1
    for module in holders:
        monkeypatch.setattr(module, "resolve", counted)


def test_a_key_from_the_form_reaches_the_worker_resolved_once(client, settings, monkeypatch):
    resolved = []  # the value of the followed key at each resolve()
    real_resolve = resolve_module.resolve

    def counted(cfg):
        resolved.append(cfg.actor_rollout_ref.actor.grad_clip)
        return real_resolve(cfg)

    count_resolves(monkeypatch, counted)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # one worker, in this process (ray_init.mode=auto)
    settings.job_workdir = REPO

    # verl 0.9's spelling of actor_rollout_ref.actor.grad_clip, as a pasted command writes it
    created = client.post(f"{API}/runs", json={"preset": "demo", "overrides": [
        "actor_rollout_ref.actor.optim.clip_grad=0.7", "trainer.total_training_steps=1"]})
    assert created.status_code == 201, created.text
    shown = created.json()["resolved_config"]
    assert shown["actor_rollout_ref"]["actor"]["grad_clip"] == 0.7
    assert resolved == [0.7]

    with Session(client.app.state.engine) as session:  # what the dispatcher does on launch
        entrypoint = job_command(session.get(Run, created.json()["id"]), settings, sys.executable)
    argv = shlex.split(entrypoint.split(" && exec ", 1)[1])
    assert argv[1:3] == ["-m", "engine.main_ppo"] and argv[3] == "--config-file" and len(argv) == 5
    written = json.loads(Path(argv[4]).read_text())
    run_dir = settings.runs_dir / str(created.json()["id"])
    assert Path(argv[4]).parent == run_dir.resolve()
    # the file is the config the UI shows, with the keys the server sets on a launch (where it reports and saves)
    assert written["trainer"].pop("logger") == shown["trainer"]["logger"] + ["dashboard"]
    assert written["trainer"].pop("default_local_dir") == str(run_dir / "checkpoints")
    assert written["trainer"].pop("dashboard_url") == settings.server_url
    assert {k: v for k, v in shown["trainer"].items() if k not in ("logger", "default_local_dir", "dashboard_url")} \
        == written["trainer"]
    assert {k: v for k, v in shown.items() if k != "trainer"} == {k: v for k, v in written.items() if k != "trainer"}

    # the job: its own argument handling (main_ppo.main's first call), then the workers as main_ppo.run starts them
    from engine.config import config_from_argv
    from engine.main_ppo import pick_device, plan_job, prepare
    from engine.workers.launch import start_workers

    cfg = config_from_argv(argv[3:])
    job, _ = plan_job(cfg, pick_device(cfg))
    _, _, _, _, total_steps = prepare(job)
    workers = start_workers(job, total_steps, job.trainer.device)
    try:
        worker_cfg = workers.group.workers[0].cfg
    finally:
        workers.stop()
    assert worker_cfg.actor_rollout_ref.actor.grad_clip == 0.7
    assert resolved == [0.7], "the config was resolved again on its way to the worker"


def test_a_resume_continues_from_the_parents_resolved_config(client, settings, monkeypatch):
    run = client.post(f"{API}/runs", json={"preset": "demo", "overrides": ["trainer.total_training_steps=4"]}).json()
    step_dir = settings.runs_dir / str(run["id"]) / "checkpoints" / "global_step_2"
    step_dir.mkdir(parents=True)
    (step_dir / "model.pt").write_bytes(b"x")
    assert client.post(f"{API}/runs/{run['id']}/cancel").status_code == 200
    calls = []
    real_resolve = resolve_module.resolve
    count_resolves(monkeypatch, lambda cfg: calls.append(1) or real_resolve(cfg))
    child = client.post(f"{API}/runs/{run['id']}/resume")
    assert child.status_code == 201, child.text
    child = child.json()
    assert calls == []
    trainer = child["resolved_config"]["trainer"]
    assert trainer.pop("resume_mode") == "resume_path" and trainer.pop("resume_from_path") == str(step_dir.resolve())
    parent = run["resolved_config"]
    assert {k: v for k, v in parent["trainer"].items() if not k.startswith("resume_")} == trainer
    assert {k: v for k, v in parent.items() if k != "trainer"} == {
        k: v for k, v in child["resolved_config"].items() if k != "trainer"}
    assert child["config"] == {"trainer": {"total_training_steps": 4, "resume_mode": "resume_path",
                                           "resume_from_path": str(step_dir.resolve())}}
