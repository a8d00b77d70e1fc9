"""The dispatcher: one asyncio task that wires the parts. Connect to Ray (head.py), reconcile the database with
the cluster (reconcile.py), then every poll interval (or at once when woken): heal the owned head if it died,
follow each in-flight run's job status (its logs: logs.py; a job that ended: its spool, spool.py, then its
final status), and submit the queued runs (queue.py) with retries (submit.py)."""
from __future__ import annotations

import asyncio
import logging
import time

from sqlalchemy.engine import Engine
from sqlmodel import Session

from backend.models import Run, RunStatus
from backend.services.dispatch import queue, records, spool
from backend.services.dispatch.head import RayConnection
from backend.services.dispatch.logs import JobLogs
from backend.services.dispatch.reconcile import missing, reconcile
from backend.services.dispatch.submit import submit
from backend.services.events import EventBus
from backend.services.runs import set_status
from backend.settings import Settings

log = logging.getLogger("rlstudio.dispatch")

JOB_STATUS = {"PENDING": RunStatus.starting, "RUNNING": RunStatus.running, "SUCCEEDED": RunStatus.succeeded,
              "FAILED": RunStatus.failed, "STOPPED": RunStatus.cancelled}


class Dispatcher:
    def __init__(self, settings: Settings, engine: Engine, bus: EventBus):
        self.settings, self.engine, self.bus = settings, engine, bus
        self.state = "starting"
        self.ray = RayConnection(settings, on_state=self._say)
        self.logs = JobLogs(engine, bus, lambda: self.ray.client)
        self._wake = asyncio.Event()
        self._ready = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._pending_said: dict[int, str] = {}

    def _say(self, state: str) -> None:
        self.state = state

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
        await self.logs.stop()
        if await self.ray.stop_head():
            # the head we owned is gone, and every job on it: say so now rather than at the next start
            records.mark_lost(self.engine, self.bus, "The server shut down and stopped its local Ray head, which "
                                                     "ended this run.")

    async def _main(self) -> None:
        try:
            await self.ray.connect()
        except Exception as exc:  # noqa: BLE001 - reported through /health; queued runs wait
            self.state = f"error: cannot reach Ray ({exc})"
            log.error("dispatch: %s", self.state)
            return
        try:
            dead = self.ray.head.previous if self.ray.head is not None else None
            await reconcile(self.engine, self.bus, self.ray.client, self.ray.address, dead)
        except Exception:  # still dispatch; the next start reconciles again
            log.exception("reconcile failed")
        self.state = self.ray.ready_state()  # ready (after reconcile: the runs' states are current)
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

    async def _heal(self, keep_run: int | None = None) -> bool:
        return await self.ray.heal(lambda reason: records.mark_lost(self.engine, self.bus, reason, keep=keep_run))

    # ------------------------------------------------------------------------------------------ tick
    async def _tick(self) -> None:
        await self._heal()
        for run in records.in_flight(self.engine, submitted=True):
            await self._follow_status(run)
        for run in queue.next_to_launch(self.engine, self.settings.max_concurrent_runs):
            submission_id = await submit(run, settings=self.settings, engine=self.engine, bus=self.bus, ray=self.ray,
                                         heal=lambda run_id=run.id: self._heal(keep_run=run_id))
            if submission_id is not None:
                self.logs.follow(run.id, submission_id)

    async def _follow_status(self, run: Run) -> None:
        try:
            info = await asyncio.to_thread(self.ray.client.get_job_info, run.submission_id)
        except Exception as exc:  # noqa: BLE001
            if missing(exc):
                records.finish(self.engine, self.bus, run.id, RunStatus.lost, f"Ray job {run.submission_id} disappeared.")
            return
        status = JOB_STATUS.get(str(getattr(info.status, "value", info.status)))
        if status is None:
            return
        if status in (RunStatus.starting, RunStatus.running):
            if status == RunStatus.starting and info.message and self._pending_said.get(run.id) != info.message:
                self._pending_said[run.id] = info.message  # what Ray says a pending job waits for, said once
                log.info("run %s: Ray job %s is pending: %s", run.id, run.submission_id, info.message)
            self.logs.follow(run.id, run.submission_id)
            if status == RunStatus.running and run.status == RunStatus.starting:
                with Session(self.engine, expire_on_commit=False) as session:
                    fresh = session.get(Run, run.id)
                    if fresh is not None and set_status(session, fresh, RunStatus.running):
                        session.commit()
                        self.bus.notify()
            return
        await self.logs.drain(run.id, run.submission_id)
        await spool.replay(self.engine, run.id, self.settings.server_url)
        error = None
        if status == RunStatus.failed:
            error = info.message or "The Ray job failed."
        records.finish(self.engine, self.bus, run.id, status, error)

    async def stop_job(self, submission_id: str, timeout: float = 10.0) -> None:
        """Stop the job: Ray sends SIGTERM to the entrypoint's process group, then SIGKILL; the job's
        actors and workers die with their driver. Returns once Ray reports it terminal (or timeout)."""
        if self.ray.client is None:
            return
        try:
            await asyncio.to_thread(self.ray.client.stop_job, submission_id)
        except Exception as exc:  # noqa: BLE001
            log.warning("stop_job %s: %s", submission_id, exc)
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                status = await asyncio.to_thread(self.ray.client.get_job_status, submission_id)
            except Exception:  # noqa: BLE001
                return
            if status.is_terminal():
                return
            await asyncio.sleep(0.2)
