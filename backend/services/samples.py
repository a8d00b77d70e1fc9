"""Samples (one per rollout): idempotent batch ingest and the queries behind the samples views."""
from __future__ import annotations

import time

from sqlalchemy import func
from sqlmodel import Session, select

from backend.models import Run, Sample, SampleIn, SampleStep
from backend.services.events import add_event, run_channel

FIELDS = [name for name in SampleIn.model_fields]


def ingest(session: Session, run: Run, samples: list[SampleIn]) -> int:
    if not samples:
        return 0
    from backend.services.upsert import insert_for, write_lock

    now = time.time()
    rows: dict[tuple, dict] = {}
    for s in samples:
        row = s.model_dump()
        row.update(run_id=run.id, wall_time=now)
        rows[(s.split, s.step, s.sample_index)] = row
    stmt = insert_for(session, Sample)
    updated = {name: stmt.excluded[name] for name in FIELDS + ["wall_time"]
               if name not in ("split", "step", "sample_index")}
    stmt = stmt.on_conflict_do_update(index_elements=["run_id", "split", "step", "sample_index"], set_=updated)
    with write_lock(session):
        session.execute(stmt, list(rows.values()))
        by_step: dict[tuple[int, str], int] = {}
        for split, step, _ in rows:
            by_step[(step, split)] = by_step.get((step, split), 0) + 1
        add_event(session, run_channel(run.id), "samples", {"batches": [
            {"step": step, "split": split, "count": n} for (step, split), n in sorted(by_step.items())]})
        session.commit()
    return len(rows)


def steps(session: Session, run_id: int) -> list[SampleStep]:
    stmt = (select(Sample.step, Sample.split, func.count(), func.avg(Sample.score))
            .where(Sample.run_id == run_id).group_by(Sample.step, Sample.split).order_by(Sample.step, Sample.split))
    return [SampleStep(step=s, split=sp, count=c, mean_score=m) for s, sp, c, m in session.execute(stmt).all()]
