"""The run records every part of the dispatcher reads and ends: which runs are in flight, and how a run ends
(its status, the error, the log tail of a run that failed or was lost; the live feed is told)."""
from __future__ import annotations

import logging

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from backend.models import Run, RunStatus
from backend.services.events import EventBus
from backend.services.runs import log_tail, set_status

log = logging.getLogger("rlstudio.dispatch")

IN_FLIGHT = (RunStatus.starting, RunStatus.running)


def in_flight(engine: Engine, *, submitted: bool = False) -> list[Run]:
    """The server's runs that are starting or running (`submitted`: only those with a Ray job), by id."""
    query = select(Run).where(Run.source == "server", Run.status.in_(IN_FLIGHT))
    if submitted:
        query = query.where(Run.submission_id.is_not(None))
    with Session(engine, expire_on_commit=False) as session:
        return list(session.exec(query.order_by(Run.id)).all())


def finish(engine: Engine, bus: EventBus, run_id: int, status: RunStatus, error: str | None) -> None:
    """End a run (a terminal state sticks: the first one wins)."""
    with Session(engine, expire_on_commit=False) as session:
        run = session.get(Run, run_id)
        if run is None:
            return
        tail = log_tail(session, run_id) if status in (RunStatus.failed, RunStatus.lost) else None
        if set_status(session, run, status, error=error, log_tail=tail):
            session.commit()
            bus.notify()


def mark_lost(engine: Engine, bus: EventBus, reason: str, *, keep: int | None = None) -> None:
    """Every in-flight run (but `keep`) is `lost`, for `reason`."""
    for run in in_flight(engine):
        if run.id != keep:
            finish(engine, bus, run.id, RunStatus.lost, reason)
