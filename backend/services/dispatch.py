"""Runs as Ray jobs. One asyncio task: start (or connect to) Ray, reconcile what the database believes with
what the cluster has, then every poll interval follow each job's status, launch queued runs in FIFO order
up to the concurrency limit, and stream each job's output into the log table."""
from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
import uuid
from pathlib import Path

from sqlalchemy import func
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from backend.models import LogLine, Run, RunStatus
from backend.services import run_config
from backend.services.events import EventBus
from backend.services.logs import insert_lines
from backend.services.ray_head import LocalRayHead, read_token
from backend.services.runs import log_tail, new_token, set_status
from backend.settings import Settings
from engine.loggers.dashboard import Spool
from engine.loggers.dashboard import replay as replay_spool
from engine.trainer import HOLD_ENV

log = logging.getLogger("rlstudio.dispatch")
# Ray's job client logs at INFO on Ray's own console handler, e.g. "WebSocket closed for job ..." each time a run's
# log tail ends: the run's log and this server's own lines say what happened
RAY_CLIENT_LOGGERS = ("ray.dashboard.modules.job.sdk", "ray.dashboard.modules.dashboard_sdk")


def quiet_ray_job_client() -> None:
    """Only warnings and errors from Ray's job client."""
    import ray.dashboard.modules.job.sdk  # noqa: F401 - importing it sets its loggers to INFO: ours comes after

    for name in RAY_CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


JOB_STATUS = {"PENDING": RunStatus.starting, "RUNNING": RunStatus.running, "SUCCEEDED": RunStatus.succeeded,
              "FAILED": RunStatus.failed, "STOPPED": RunStatus.cancelled}
IN_FLIGHT = (RunStatus.starting, RunStatus.running)


# A head that has just started answers the job API before its job agent registers ("No available agent to
# submit job, please try again later"), and a busy dashboard may drop a connection: a submission that failed
# for such a reason is retried this long before the run fails.
SUBMIT_RETRY_S = 120.0
TRANSIENT = ("no available agent", "try again later", "connection aborted", "remotedisconnected",
             "connection refused", "connection reset", "timed out", "status code 503")


def _not_ready(exc: Exception) -> bool:
    import requests

    text = str(exc).lower()
    return isinstance(exc, (requests.ConnectionError, requests.Timeout)) or any(t in text for t in TRANSIENT)


def _missing(exc: Exception) -> bool:
    text = str(exc).lower()
    return "does not exist" in text or "404" in text or "not found" in text


def _cluster_token(settings: Settings) -> str | None:
    if settings.ray_auth_token is not None:
        return settings.ray_auth_token.get_secret_value()
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"]
    for candidate in (os.environ.get("RAY_AUTH_TOKEN_PATH"), str(Path.home() / ".ray" / "auth_token")):
        if candidate and Path(candidate).is_file():
            return read_token(Path(candidate))
    return None


class Dispatcher:
    def __init__(self, settings: Settings, engine: Engine, bus: EventBus):
        self.settings, self.engine, self.bus = settings, engine, bus
        self.head: LocalRayHead | None = None
        self.client = None
        self.address: str | None = None
        self.state = "starting"
        self._wake = asyncio.Event()
        self._ready = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._followers: dict[int, asyncio.Task] = {}
        self._pending_said: dict[int, str] = {}

    # ------------------------------------------------------------------------------------------- life
    def describe(self) -> str:
        return self.state

    def wake(self) -> None:
        self._wake.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._main(), name="rlstudio-dispatch")

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for task in self._followers.values():
            task.cancel()
        await asyncio.gather(*self._followers.values(), return_exceptions=True)
        if self.head is not None:
            await asyncio.to_thread(self.head.stop)
            # the head we owned is gone, and every job on it: say so now rather than at the next start
            await self._mark_in_flight_lost("The server shut down and stopped its local Ray head, which ended "
                                            "this run.")

    async def _connect(self) -> None:
        if self.settings.ray_address:
            self.address, token = self.settings.ray_address, _cluster_token(self.settings)
        else:
            self.state = "starting a local Ray head"
            self.head = LocalRayHead(self.settings.data_dir, self.settings.ray_num_cpus)
            self.address = await asyncio.to_thread(self.head.start)
            token = self.head.token
        await self._open_client(token)

    async def _open_client(self, token: str | None) -> None:
        from ray.job_submission import JobSubmissionClient

        quiet_ray_job_client()
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self.client = await asyncio.to_thread(JobSubmissionClient, self.address, headers=headers)

    def _ready_state(self) -> str:
        state = f"ray {self.address}"
        if self.head is not None:
            state += (" (local head owned by this server, re-attached: started by an earlier server on this "
                      "data dir)" if self.head.attached else " (local head owned by this server)")
        return state

    async def _heal_head(self, keep_run: int | None = None) -> bool:
        """The head this server owns can die under it (the OOM killer, a component that crashed: `ray start
        --block` then takes every component down). Its jobs died with it: their runs are `lost`, saying why
        (except `keep_run`, which is being submitted and goes to the new head), and a new head starts.
        Returns True when the head was dead and a new one is up."""
        if self.head is None or self.head.alive():
            return False
        why = self.head.why_dead()
        log.error("the local Ray head at %s died (%s); starting a new one", self.address, why)
        with Session(self.engine, expire_on_commit=False) as session:
            runs = session.exec(select(Run).where(Run.source == "server", Run.status.in_(IN_FLIGHT))).all()
        for run in runs:
            if run.id != keep_run:
                await self._finish(run.id, RunStatus.lost,
                                   f"The server's local Ray head ({self.address}) died while the run was in flight, "
                                   f"and its Ray job with it. {why}")
        self.state = "restarting the local Ray head"
        await asyncio.to_thread(self.head.stop)  # whatever is left of its process group
        self.head.attached = False
        self.address = await asyncio.to_thread(self.head.start)
        await self._open_client(self.head.token)
        self.state = self._ready_state()
        return True

    async def _main(self) -> None:
        try:
            await self._connect()
        except Exception as exc:  # noqa: BLE001 - reported through /health; queued runs wait
            self.state = f"error: cannot reach Ray ({exc})"
            log.error("dispatch: %s", self.state)
            return
        try:
            await self._reconcile()
        except Exception:  # still dispatch; the next start reconciles again
            log.exception("reconcile failed")
        self.state = self._ready_state()  # ready (after reconcile: the runs' states are current)
        self._ready.set()
        while True:
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dispatch tick failed")
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self.settings.poll_interval_s)
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------------------------- reconcile
    async def _mark_in_flight_lost(self, reason: str) -> None:
        with Session(self.engine, expire_on_commit=False) as session:
            runs = session.exec(select(Run).where(Run.source == "server", Run.status.in_(IN_FLIGHT))).all()
        for run in runs:
            await self._finish(run.id, RunStatus.lost, reason)

    async def _reconcile(self) -> None:
        """A run the database calls starting/running whose Ray job no longer exists is `lost`; one whose job
        is still there (the server was killed, its head was not, and we re-attached) is followed again."""
        dead = self.head.previous if self.head is not None else None
        with Session(self.engine, expire_on_commit=False) as session:
            runs = session.exec(select(Run).where(Run.source == "server", Run.status.in_(IN_FLIGHT))).all()
        for run in runs:
            if not run.submission_id:
                await self._finish(run.id, RunStatus.lost, "The server stopped before the run was submitted to Ray.")
                continue
            try:
                await asyncio.to_thread(self.client.get_job_info, run.submission_id)
            except Exception as exc:  # noqa: BLE001
                if _missing(exc) and dead is not None:
                    await self._finish(run.id, RunStatus.lost,
                                       f"The server's local Ray head (pid {dead.pid}, {dead.address}) had died when "
                                       f"the server started again, and Ray job {run.submission_id} with it.")
                elif _missing(exc):
                    await self._finish(run.id, RunStatus.lost,
                                       f"Ray job {run.submission_id} no longer exists on {self.address} (the Ray "
                                       "cluster was restarted, or the server that owned it stopped); found when "
                                       "the server started.")
                else:
                    log.warning("reconcile: run %s: %s", run.id, exc)

    # ------------------------------------------------------------------------------------------ tick
    async def _tick(self) -> None:
        await self._heal_head()
        with Session(self.engine, expire_on_commit=False) as session:
            in_flight = session.exec(select(Run).where(Run.source == "server", Run.status.in_(IN_FLIGHT),
                                                       Run.submission_id.is_not(None))).all()
        for run in in_flight:
            await self._follow_status(run)
        with Session(self.engine, expire_on_commit=False) as session:
            busy = session.exec(select(func.count()).select_from(Run).where(
                Run.source == "server", Run.status.in_(IN_FLIGHT))).one()
            free = max(self.settings.max_concurrent_runs - busy, 0)
            queued = session.exec(select(Run).where(Run.source == "server", Run.status == RunStatus.queued)
                                  .order_by(Run.id).limit(free)).all() if free else []
        for run in queued:
            await self._submit(run)

    async def _follow_status(self, run: Run) -> None:
        try:
            info = await asyncio.to_thread(self.client.get_job_info, run.submission_id)
        except Exception as exc:  # noqa: BLE001
            if _missing(exc):
                await self._finish(run.id, RunStatus.lost, f"Ray job {run.submission_id} disappeared.")
            return
        status = JOB_STATUS.get(str(getattr(info.status, "value", info.status)))
        if status is None:
            return
        if status in (RunStatus.starting, RunStatus.running):
            if status == RunStatus.starting and info.message and self._pending_said.get(run.id) != info.message:
                self._pending_said[run.id] = info.message  # what Ray says a pending job waits for, said once
                log.info("run %s: Ray job %s is pending: %s", run.id, run.submission_id, info.message)
            if run.id not in self._followers:
                self._followers[run.id] = asyncio.create_task(self._follow_logs(run.id, run.submission_id))
            if status == RunStatus.running and run.status == RunStatus.starting:
                with Session(self.engine, expire_on_commit=False) as session:
                    fresh = session.get(Run, run.id)
                    if fresh is not None and set_status(session, fresh, RunStatus.running):
                        session.commit()
                        self.bus.notify()
            return
        await self._drain_logs(run.id, run.submission_id)
        await self._replay_spool(run.id)
        error = None
        if status == RunStatus.failed:
            error = info.message or "The Ray job failed."
        await self._finish(run.id, status, error)

    async def _finish(self, run_id: int, status: RunStatus, error: str | None) -> None:
        with Session(self.engine, expire_on_commit=False) as session:
            run = session.get(Run, run_id)
            if run is None:
                return
            tail = log_tail(session, run_id) if status in (RunStatus.failed, RunStatus.lost) else None
            if set_status(session, run, status, error=error, log_tail=tail):
                session.commit()
                self.bus.notify()

    async def _replay_spool(self, run_id: int) -> None:
        """The job has ended: send what its dashboard logger left in its spool (the server was down for longer
        than the logger waits at exit). The job's ingest token is gone with it, so the run gets a new one."""
        with Session(self.engine, expire_on_commit=False) as session:
            run = session.get(Run, run_id)
            if run is None or not run.run_dir:
                return
            spool_file = Path(run.run_dir) / "spool" / f"run-{run_id}.jsonl"
            if not Spool(str(spool_file)).pending():
                return
            token, run.ingest_token_hash = new_token()
            session.add(run)
            session.commit()
        try:
            sent = await asyncio.to_thread(replay_spool, str(spool_file), self.settings.server_url, token)
        except Exception as exc:  # noqa: BLE001 - the file stays; the next start tries again
            log.warning("run %s: could not replay its logger's spool %s: %s", run_id, spool_file, exc)
            return
        log.info("run %s: replayed %s request(s) its logger had spooled", run_id, sent)

    # ---------------------------------------------------------------------------------------- submit
    async def _submit(self, run: Run) -> None:
        token, token_hash = new_token()
        submission_id = f"rlstudio-run-{run.id}-{uuid.uuid4().hex[:8]}"
        run_dir = Path(run.run_dir)
        python = self.settings.job_python or (sys.executable if self.head else "python")
        try:
            entrypoint = job_command(run, self.settings, python)
        except OSError as exc:  # e.g. the run's directory was removed under the server
            await self._finish(run.id, RunStatus.failed, f"Could not write the run's config file into {run_dir}: {exc}")
            return
        env = {"RLSTUDIO_URL": self.settings.server_url, "RLSTUDIO_RUN_ID": str(run.id),
               "RLSTUDIO_INGEST_TOKEN": token, "RLSTUDIO_SPOOL_DIR": str(run_dir / "spool"),
               "PYTHONUNBUFFERED": "1"}
        if os.environ.get(HOLD_ENV):  # the tests' step gate (engine/trainer/hold.py)
            env[HOLD_ENV] = os.environ[HOLD_ENV]
        with Session(self.engine, expire_on_commit=False) as session:
            fresh = session.get(Run, run.id)
            if fresh is None or fresh.status != RunStatus.queued:
                return
            fresh.submission_id, fresh.ingest_token_hash = submission_id, token_hash
            set_status(session, fresh, RunStatus.starting)
            session.commit()
        self.bus.notify()
        deadline = time.monotonic() + SUBMIT_RETRY_S
        while True:
            try:
                await asyncio.to_thread(self.client.submit_job, entrypoint=entrypoint, submission_id=submission_id,
                                        runtime_env={"env_vars": env},
                                        metadata={"rlstudio_run_id": str(run.id)})
                break
            except Exception as exc:  # noqa: BLE001 - the run failed to launch; say why
                text = str(exc).lower()
                if "already exists" in text:  # an earlier attempt went through after all
                    break
                if _not_ready(exc) and time.monotonic() < deadline:
                    log.info("run %s: Ray is not ready to take jobs yet (%s); trying again", run.id, exc)
                    try:
                        if await self._heal_head(keep_run=run.id):
                            deadline = time.monotonic() + SUBMIT_RETRY_S
                    except Exception as heal_exc:  # noqa: BLE001 - no head: the run cannot start; say why
                        await self._finish(run.id, RunStatus.failed, f"Could not submit the Ray job: the local "
                                           f"Ray head died and a new one did not start ({heal_exc}).")
                        return
                    await asyncio.sleep(1.0)
                    continue
                if self.head is not None:  # a head that is up but never takes the job: show what it logged
                    exc = f"{exc} (local head: {self.head.why_dead()})"
                await self._finish(run.id, RunStatus.failed, f"Could not submit the Ray job: {exc}")
                return
        log.info("run %s submitted as Ray job %s", run.id, submission_id)
        self._followers[run.id] = asyncio.create_task(self._follow_logs(run.id, submission_id))

    async def stop_job(self, submission_id: str, timeout: float = 10.0) -> None:
        """Stop the job: Ray sends SIGTERM to the entrypoint's process group, then SIGKILL; the job's
        actors and workers die with their driver. Returns once Ray reports it terminal (or timeout)."""
        if self.client is None:
            return
        try:
            await asyncio.to_thread(self.client.stop_job, submission_id)
        except Exception as exc:  # noqa: BLE001
            log.warning("stop_job %s: %s", submission_id, exc)
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                status = await asyncio.to_thread(self.client.get_job_status, submission_id)
            except Exception:  # noqa: BLE001
                return
            if status.is_terminal():
                return
            await asyncio.sleep(0.2)

    # ------------------------------------------------------------------------------------------ logs
    def _stored_lines(self, run_id: int) -> int:
        with Session(self.engine) as session:
            return session.exec(select(func.count()).select_from(LogLine).where(
                LogLine.run_id == run_id, LogLine.source == "job")).one()

    def _store(self, run_id: int, first_seq: int, lines: list[str]) -> None:
        if not lines:
            return
        now = time.time()
        with Session(self.engine) as session:
            insert_lines(session, run_id, "job", [(first_seq + i, text, now) for i, text in enumerate(lines)])
        self.bus.notify()

    async def _follow_logs(self, run_id: int, submission_id: str) -> None:
        """Tail the job's output into the log table; line numbers make a restart of the server (which
        replays the log from its start) insert each line once."""
        skip = await asyncio.to_thread(self._stored_lines, run_id)
        seq, pending, batch, last_flush = 0, "", [], time.monotonic()
        try:
            async for chunk in self.client.tail_job_logs(submission_id):
                pending += chunk
                *complete, pending = pending.split("\n")
                for line in complete:
                    if seq >= skip:
                        batch.append(_screen_line(line))
                    seq += 1
                if batch and (len(batch) >= 200 or time.monotonic() - last_flush > 0.3):
                    await asyncio.to_thread(self._store, run_id, seq - len(batch), batch)
                    batch, last_flush = [], time.monotonic()
            if pending:
                if seq >= skip:
                    batch.append(_screen_line(pending))
                seq += 1
            await asyncio.to_thread(self._store, run_id, seq - len(batch), batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the final drain fills any gap
            log.info("log tail of run %s ended: %s", run_id, exc)
        finally:
            self._followers.pop(run_id, None)

    async def _drain_logs(self, run_id: int, submission_id: str) -> None:
        """After the job ends: let the tail finish, then add whatever it missed from the full log."""
        follower = self._followers.get(run_id)
        if follower is not None:
            try:
                await asyncio.wait_for(asyncio.shield(follower), 5)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                follower.cancel()
        try:
            text = await asyncio.to_thread(self.client.get_job_logs, submission_id)
        except Exception:  # noqa: BLE001
            return
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        stored = await asyncio.to_thread(self._stored_lines, run_id)
        if len(lines) > stored:
            await asyncio.to_thread(self._store, run_id, stored, [_screen_line(x) for x in lines[stored:]])


def _screen_line(line: str) -> str:
    """What a terminal shows of a line rewritten with carriage returns (progress bars)."""
    line = line.rstrip("\r")
    return line.rsplit("\r", 1)[-1]


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
