"""The stall sweep: a run that stopped logging sends nothing to judge it by, so every `every_s` seconds the server
judges each running run against the clock (backend/services/health/stall.py) and stops the Ray job of one its
health rule cancels."""
from __future__ import annotations

import asyncio
import logging

from sqlmodel import Session, select

from backend.models import Run, RunStatus
from backend.services.events import wake_on_commit
from backend.services.health.hooks import refresh_stalled

log = logging.getLogger("rlstudio")


def sweep_once(engine, bus=None) -> list[str]:
    """Judge every running run now; returns the Ray jobs to stop."""
    jobs = []
    with Session(engine, expire_on_commit=False) as session:
        if bus is not None:
            wake_on_commit(session, bus)  # a changed alarm's event reaches the SSE streams at once
        for run in session.exec(select(Run).where(Run.status == RunStatus.running)).all():
            job = refresh_stalled(session, run)
            if job:
                jobs.append(job)
    return jobs


async def sweep_forever(app, every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        try:
            jobs = await asyncio.to_thread(sweep_once, app.state.engine, app.state.bus)
        except Exception:  # the sweep must outlive a bad row: say so and go on
            log.exception("health: the stall sweep failed")
            continue
        dispatcher = getattr(app.state, "dispatcher", None)
        for job in jobs:
            if dispatcher is not None:
                await dispatcher.stop_job(job)
