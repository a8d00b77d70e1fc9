"""Log lines: idempotent inserts from the Ray job's output and from the engine's logger."""
from __future__ import annotations

from operator import itemgetter

from sqlalchemy import func
from sqlmodel import Session, select

from backend.models import LogLine
from backend.services.events import add_event, run_channel
from backend.services.upsert import in_lock_order, insert_for, write_lock


def insert_lines(session: Session, run_id: int, source: str, lines: list[tuple[int, str, float]]) -> int:
    if not lines:
        return 0
    stmt = insert_for(session, LogLine).on_conflict_do_nothing(index_elements=["run_id", "source", "seq"])
    rows = [{"run_id": run_id, "source": source, "seq": seq, "text": text, "time": t}
            for seq, text, t in in_lock_order(session, lines, key=itemgetter(0))]
    with write_lock(session):
        session.execute(stmt, rows)
        add_event(session, run_channel(run_id), "logs",
                  {"source": source, "lines": [[seq, text, t] for seq, text, t in lines]})
        session.commit()
    return len(lines)


def list_lines(*, session: Session, run_id: int, source: str | None = None, after_id: int | None = None,
               tail: int | None = None, skip: int = 0, limit: int = 1000) -> tuple[list[LogLine], int]:
    """A run's lines in order: the last `tail` of them, or one page (`skip`/`limit`, after `after_id`); and
    the number that match."""
    stmt = select(LogLine).where(LogLine.run_id == run_id)
    if source:
        stmt = stmt.where(LogLine.source == source)
    if after_id is not None:
        stmt = stmt.where(LogLine.id > after_id)
    count = session.exec(select(func.count()).select_from(stmt.subquery())).one()
    if tail is not None:
        return list(reversed(session.exec(stmt.order_by(LogLine.id.desc()).limit(tail)).all())), count
    return list(session.exec(stmt.order_by(LogLine.id).offset(skip).limit(limit)).all()), count
