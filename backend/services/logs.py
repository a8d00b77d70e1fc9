"""Log lines: idempotent inserts from the Ray job's output and from the engine's logger."""
from __future__ import annotations

from sqlmodel import Session

from backend.models import LogLine
from backend.services.events import add_event, run_channel
from backend.services.upsert import insert_for, write_lock


def insert_lines(session: Session, run_id: int, source: str, lines: list[tuple[int, str, float]]) -> int:
    if not lines:
        return 0
    stmt = insert_for(session, LogLine).on_conflict_do_nothing(index_elements=["run_id", "source", "seq"])
    rows = [{"run_id": run_id, "source": source, "seq": seq, "text": text, "time": t} for seq, text, t in lines]
    with write_lock(session):
        session.execute(stmt, rows)
        add_event(session, run_channel(run_id), "logs",
                  {"source": source, "lines": [[seq, text, t] for seq, text, t in lines]})
        session.commit()
    return len(lines)
