"""A queued run becomes a Ray job: its config file and entrypoint, its environment (where to report, its own
ingest token, where to spool, the settings' `job_env`), the record moved to `starting`, and the submission,
retried while Ray is not ready to take jobs."""
from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session

from backend.models import Run, RunStatus
from backend.services import run_config
from backend.services.dispatch import records
from backend.services.dispatch.head import RayConnection
from backend.services.dispatch.spool import spool_file
from backend.services.events import EventBus
from backend.services.runs import new_token, set_status
from backend.settings import Settings

log = logging.getLogger("rlstudio.dispatch")

# A head that has just started answers the job API before its job agent registers ("No available agent to
# submit job, please try again later"), and a busy dashboard may drop a connection: a submission that failed
# for such a reason is retried this long before the run fails.
SUBMIT_RETRY_S = 120.0
RETRY_PAUSE_S = 1.0
TRANSIENT = ("no available agent", "try again later", "connection aborted", "remotedisconnected",
             "connection refused", "connection reset", "timed out", "status code 503")


def not_ready(exc: Exception) -> bool:
    """Whether a submission failed because Ray is not (yet) able to take it: worth another try."""
    import requests

    text = str(exc).lower()
    return isinstance(exc, (requests.ConnectionError, requests.Timeout)) or any(t in text for t in TRANSIENT)


class SubmitFailed(Exception):
    """The job could not be submitted; the message is the run's error."""


async def with_retries(attempt: Callable[[], object], heal: Callable[[], Awaitable[bool]], *, run_id: int,
                       retry_s: float = SUBMIT_RETRY_S, pause_s: float = RETRY_PAUSE_S,
                       note: Callable[[], str | None] = lambda: None) -> None:
    """Call `attempt` (in a thread) until it goes through. An error that says the job already exists means an
    earlier attempt went through after all. A transient error (`not_ready`) is tried again after `pause_s` until
    `retry_s` has passed since the first attempt, or since `heal()` last returned True (a dead head was
    replaced); any other error, or a `heal()` that raises, raises SubmitFailed at once. `note()`: a word on the
    head for the error (what it logged)."""
    deadline = time.monotonic() + retry_s
    while True:
        try:
            await asyncio.to_thread(attempt)
            return
        except Exception as exc:
            if "already exists" in str(exc).lower():
                return
            if not_ready(exc) and time.monotonic() < deadline:
                log.info("run %s: Ray is not ready to take jobs yet (%s); trying again", run_id, exc)
                try:
                    if await heal():
                        deadline = time.monotonic() + retry_s
                except Exception as heal_exc:
                    raise SubmitFailed(f"Could not submit the Ray job: the local Ray head died and a new one did "
                                       f"not start ({heal_exc}).") from heal_exc
                await asyncio.sleep(pause_s)
                continue
            said = note()
            raise SubmitFailed(f"Could not submit the Ray job: {exc}" + (f" (local head: {said})" if said is not None else "")
                               ) from exc


async def submit(run: Run, *, settings: Settings, engine: Engine, bus: EventBus, ray: RayConnection,
                 heal: Callable[[], Awaitable[bool]]) -> str | None:
    """Launch a queued run as a Ray job; its submission id, or None when it did not go (the run failed, saying
    why, or it was no longer queued). `heal()`: replace a dead head, keeping this run (see with_retries)."""
    token, token_hash = new_token()
    submission_id = f"rlstudio-run-{run.id}-{uuid.uuid4().hex[:8]}"
    run_dir = Path(run.run_dir)
    python = settings.job_python or (sys.executable if ray.head else "python")
    try:
        entrypoint = job_command(run, settings, python)
    except OSError as exc:  # e.g. the run's directory was removed under the server
        records.finish(engine, bus, run.id, RunStatus.failed, f"Could not write the run's config file into {run_dir}: {exc}")
        return None
    env = job_env(run, settings, token)
    with Session(engine, expire_on_commit=False) as session:
        fresh = session.get(Run, run.id)
        if fresh is None or fresh.status != RunStatus.queued:
            return None
        fresh.submission_id, fresh.ingest_token_hash = submission_id, token_hash
        set_status(session, fresh, RunStatus.starting)
        session.commit()
    bus.notify()
    try:
        await with_retries(lambda: ray.client.submit_job(entrypoint=entrypoint, submission_id=submission_id,
                                                         runtime_env={"env_vars": env},
                                                         metadata={"rlstudio_run_id": str(run.id)}),
                           heal, run_id=run.id, note=ray.head_note)
    except SubmitFailed as failed:
        records.finish(engine, bus, run.id, RunStatus.failed, str(failed))
        return None
    log.info("run %s submitted as Ray job %s", run.id, submission_id)
    return submission_id


def job_env(run: Run, settings: Settings, token: str) -> dict[str, str]:
    """The job's environment: the settings' `job_env` (e.g. RLSTUDIO_AFTER_STEP, engine/trainer/hooks.py), then
    where it reports, as which run, with which ingest token, and where its logger spools."""
    return {**settings.job_env, "RLSTUDIO_URL": settings.server_url, "RLSTUDIO_RUN_ID": str(run.id),
            "RLSTUDIO_INGEST_TOKEN": token, "RLSTUDIO_SPOOL_DIR": str(spool_file(run.run_dir, run.id).parent),
            "PYTHONUNBUFFERED": "1"}


def job_command(run: Run, settings: Settings, python: str) -> str:
    """The Ray job's entrypoint: the run's resolved config, with the launch keys set, written into its directory,
    and the job's command line that runs it as it is (`--config-file`)."""
    config_file = run_config.write_job_config(Path(run.run_dir), run.resolved_config,
                                              job_launch_keys(run, settings.server_url))
    workdir = str(settings.job_workdir or Path.cwd())
    return run_config.job_entrypoint(python, workdir, config_file.resolve(), settings.job_module)


def job_launch_keys(run: Run, server_url: str) -> dict:
    """What the server sets on its run's config: it reports here, and keeps its checkpoints in the run's directory
    unless the user named another place."""
    keys = {"trainer.logger": _with_dashboard(run.resolved_config), "trainer.dashboard_url": server_url}
    if not (run.config.get("trainer") or {}).get("default_local_dir"):
        keys["trainer.default_local_dir"] = str(Path(run.run_dir) / "checkpoints")
    return keys


def _with_dashboard(resolved: dict) -> list[str]:
    loggers = (resolved.get("trainer") or {}).get("logger") or ["console"]
    if isinstance(loggers, str):
        loggers = [loggers]
    out = list(loggers)
    for name in ("console", "dashboard"):
        if name not in out:
            out.append(name)
    return out
