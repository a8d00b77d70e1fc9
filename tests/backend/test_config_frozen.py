"""The job runs the config the server stored, as it is: after a real (one-step) run of the tiny demo, the job's
config is byte for byte the resolved config the server stored plus its launch keys (the file the dispatcher
wrote), and what the job decided at its start (device, local paths, packing) arrived as the run's plan instead of
being written into that config. Real parts: a uvicorn server on a real SQLite file, the dispatcher's own job command
and environment, the job's own argument handling, and the engine's run in this process (one worker, no Ray)."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import httpx
import pytest
from sqlmodel import Session, create_engine

from backend.models import Run
from backend.services.dispatch.submit import job_command, job_env, job_launch_keys
from backend.services.run_config import launch_config
from backend.services.runs import new_token
from backend.settings import Settings
from engine.config import config_from_argv, save_resolved
from engine.config.frozen import ReadOnlyConfigError
from tests.backend.conftest import HTTP_TIMEOUT, REPO

pytestmark = pytest.mark.slow  # trains one step of the demo


def test_the_job_runs_the_stored_config_byte_for_byte_and_reports_its_plan(server_factory, tmp_path, monkeypatch):
    from engine.main_ppo import run as train

    data = tmp_path / "data"
    server = server_factory(data_dir=data).start()  # no dispatcher: this test starts the job itself
    api = f"{server.url}/api/v1"
    created = httpx.post(f"{api}/runs", json={"preset": "demo", "overrides": [
        "trainer.total_training_steps=1", "trainer.test_freq=-1", "trainer.val_before_train=false"]},
        timeout=HTTP_TIMEOUT)
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]

    # what the dispatcher does on launch: the job's config file, command line and environment
    settings = Settings(data_dir=data, port=server.port, job_workdir=REPO)
    engine = create_engine(settings.db_url)
    with Session(engine) as session:
        row = session.get(Run, run_id)
        token, row.ingest_token_hash = new_token()  # as the dispatcher's submit does
        entrypoint, env = job_command(row, settings, sys.executable), job_env(row, settings, token)
        session.add(row)
        session.commit()
    engine.dispose()
    argv = shlex.split(entrypoint.split(" && exec ", 1)[1])
    job_file = Path(argv[4])
    written = job_file.read_bytes()

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # one worker, in this process
    monkeypatch.chdir(REPO)
    cfg = config_from_argv(argv[3:])  # the job's own argument handling
    assert train(cfg) == 1
    with pytest.raises(ReadOnlyConfigError):  # nothing could have rewritten it
        cfg.trainer.device = "cpu"

    ended = httpx.get(f"{api}/runs/{run_id}", timeout=HTTP_TIMEOUT).json()
    assert ended["status"] == "succeeded", ended.get("error")
    # the resolved config the server stored, with the launch keys set, in save_resolved's bytes ...
    stored = ended["resolved_config"]
    with Session(create_engine(settings.db_url)) as session:
        keys = job_launch_keys(session.get(Run, run_id), settings.server_url)
    expected = save_resolved(launch_config(stored, keys), tmp_path / "stored.json").read_bytes()
    # ... is the job's config after the run ended, and the file it read
    assert save_resolved(cfg, tmp_path / "job.json").read_bytes() == expected
    assert written == expected and job_file.read_bytes() == expected

    # what the job decided at its start came as its plan, kept with the run (its facts)
    plan = {entry["key"]: entry for entry in ended["facts"]["plan"]}
    assert stored["trainer"]["device"] == "auto" and plan["trainer.device"]["was"] == "auto"
    assert plan["trainer.device"]["value"] == ended["facts"]["device"] and plan["trainer.device"]["by"] == "driver"
    model = plan["actor_rollout_ref.model.path"]
    assert model["was"] == "builtin:tiny" and Path(model["value"]).is_dir() and "built-in" in model["why"]
    assert plan["data.train_files"]["was"] == "builtin:arith/train.parquet"
    if ended["facts"]["device"] == "cpu":  # packing is the GPU's default: the worker's plan says so
        packing = plan["actor_rollout_ref.model.use_remove_padding"]
        assert (packing["was"], packing["value"], packing["by"]) == (None, False, "worker")
