"""rlstudio's own queue: the server's `queued` runs start in the order they were created (by id), as many at a
time as `max_concurrent_runs` leaves room for next to the runs already starting or running; `explain` says why a
run waits (GET /runs/{id}/queue)."""
from __future__ import annotations

from sqlalchemy import func
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from backend.models import Run, RunQueue, RunRef, RunStatus
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


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _named(runs: list[RunRef]) -> str:
    shown = [f"run {r.id}" + (f" ({r.name})" if r.name else "") for r in runs[:3]]
    return ", ".join(shown) + (f" and {len(runs) - 3} more" if len(runs) > 3 else "")


def explain(session: Session, run: Run, *, max_concurrent: int, dispatch: bool) -> RunQueue:
    """Why `run` waits (queued: its place, the runs ahead of it, those holding the limit; starting: Ray has it)."""
    ref = lambda r: RunRef(id=r.id, name=r.name, status=r.status)
    in_flight = [ref(r) for r in session.exec(select(Run).where(Run.source == "server", Run.status.in_(IN_FLIGHT))
                                              .order_by(Run.id)).all()]
    out = RunQueue(run_id=run.id, status=run.status, waiting=run.status in (RunStatus.queued, RunStatus.starting),
                   in_flight=in_flight, max_concurrent_runs=max_concurrent, dispatch=dispatch)
    if run.status == RunStatus.starting:
        out.reason = ("Submitted to Ray; waiting for Ray to start its job (the CPUs and GPUs it asks for must be free "
                      "on the cluster).")
    if run.status != RunStatus.queued:
        return out
    out.ahead = [ref(r) for r in session.exec(select(Run).where(Run.source == "server", Run.status == RunStatus.queued,
                                                                Run.id < run.id).order_by(Run.id)).all()]
    out.position = len(out.ahead) + 1
    place = f"{_ordinal(out.position)} in the queue"
    after = f", after {_named(out.ahead)}" if out.ahead else ""
    if not dispatch:
        out.reason = (f"{place}{after}. This server does not launch runs (RLSTUDIO_DISPATCH=false): the run starts "
                      "when a server with dispatch on runs on this database.")
    elif len(in_flight) >= max_concurrent:
        limit = f"{max_concurrent} run{'' if max_concurrent == 1 else 's'} at a time"
        out.reason = (f"{place}{after}: waiting for a free slot. The limit of {limit} (RLSTUDIO_MAX_CONCURRENT_RUNS) "
                      f"is taken by {_named(in_flight)}; it starts when {'that run ends' if len(in_flight) == 1 else 'one of them ends'}"
                      f"{' and the runs ahead of it have started' if out.ahead else ''}.")
    elif out.ahead:
        out.reason = f"{place}{after}: the runs ahead of it start first."
    else:
        out.reason = "Next in the queue: a slot is free, it is being submitted to Ray."
    return out
