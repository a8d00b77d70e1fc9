"""rlstudio's own queue: the server's `queued` runs start in the order they were created (by id), as many at a
time as `max_concurrent_runs` leaves room for next to the runs already starting or running."""
from __future__ import annotations

from sqlalchemy import func
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from backend.models import Run, RunStatus
from backend.services.dispatch.records import IN_FLIGHT


def next_to_launch(engine: Engine, max_concurrent: int) -> list[Run]:
    """The queued runs to submit now, oldest first (none when the in-flight runs fill the limit)."""
    with Session(engine, expire_on_commit=False) as session:
        busy = session.exec(select(func.count()).select_from(Run).where(
            Run.source == "server", Run.status.in_(IN_FLIGHT))).one()
        free = max(max_concurrent - busy, 0)
        if not free:
            return []
        return list(session.exec(select(Run).where(Run.source == "server", Run.status == RunStatus.queued)
                                 .order_by(Run.id).limit(free)).all())
