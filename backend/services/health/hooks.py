"""Where health meets ingest: the hooks the ingest services call. A batch is judged before its write transaction
takes the database's write lock (the judging stays out of it: `judge_metrics`, `judge_samples`), written in it
(`apply`) and its run's judge lock let go after it (`release`); the heartbeat, an ended run's last step and the
stall sweep are judged and written at once."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from sqlmodel import Session

from backend.models import ACTIVE, Run
from backend.services.health import judge, sample_checks, stall, state
from backend.services.health.alarms import record_prompts, write
from backend.services.health.state import STOP_JOB, State
from backend.services.health.tracker import Change
from backend.services.upsert import write_lock


@dataclass
class Pending:
    """A batch judged, not yet written: its run's state, the alarms' changes, the run's judge lock (held until
    `release`), the GRPO groups of a step that ended."""

    row: State
    changes: list[Change]
    lock: threading.Lock
    finished: list[dict] = field(default_factory=list)


def _open(session: Session, run: Run) -> tuple[threading.Lock, State, dict]:
    """The run's judge lock (held until `release`), its state and the run's context for the checks."""
    lock = state.run_lock(session, run.id)
    row = state.load(session, run.id)
    return lock, row, row.data.setdefault("ctx", judge.context_of(run.resolved_config))


def judge_metrics(session: Session, run: Run, rows, series=None) -> Pending | None:
    """Judge the new points of a metrics batch: `rows` ((key, step, value, wall_time); NaN as None), or for a plain
    columnar batch its `series` (judge.points_of)."""
    if not state.checks_on(session):
        return None
    points, walls = judge.points_of(rows, series, state.clock())
    if not points:
        return None
    lock, row, ctx = _open(session, run)
    judged = judge.judge_points(row.data, points, walls, ctx, received=state.clock())
    return Pending(row, judge.advance_all(row, judged), lock)


def judge_samples(session: Session, run: Run, samples) -> Pending | None:
    """Judge a batch of answers (SampleIn; the training split only), as judge_metrics does."""
    if not state.checks_on(session):
        return None
    answers = [judge.answer_of(s) for s in samples if s.split == "train"]
    if not answers:
        return None
    lock, row, ctx = _open(session, run)
    judged, finished = sample_checks.judge(row.data.setdefault("answers", {}), answers, ctx)
    return Pending(row, judge.advance_all(row, judged), lock, finished)


def apply(session: Session, run: Run, pending: Pending | None) -> None:
    """Write a judged batch (inside the batch's write transaction)."""
    if pending is not None:
        record_prompts(session, run.id, pending.finished)
        write(session, run, pending.row, pending.changes)


def discard(session: Session, pending: Pending | None) -> None:
    """A judged batch whose write failed (e.g. a number the database refuses) was never stored: its run's cached
    state, which the judging advanced, is read again from the table by the next batch (called before `release`,
    under the run's judge lock). Without this one refused batch would poison every later one of its run."""
    if pending is not None:
        state.forget(session, pending.row.run_id)


def release(pending: Pending | None) -> None:
    if pending is not None and pending.lock.locked():
        pending.lock.release()


def on_metrics(session: Session, run: Run, rows, series=None) -> None:
    """judge_metrics, apply and release at once (inside a write transaction)."""
    pending = judge_metrics(session, run, rows, series)
    try:
        apply(session, run, pending)
    finally:
        release(pending)


def close_ended(session: Session, run: Run) -> None:
    """An ended run's newest step is complete: its GRPO groups join the per-prompt record (a live run's newest step
    joins it when the next step's answers arrive). Called before the record is read; commits when it wrote."""
    if run.status in ACTIVE or not state.checks_on(session):
        return
    lock = state.run_lock(session, run.id)
    try:
        with write_lock(session):
            row = state.load(session, run.id)
            finished = sample_checks.close_newest(row.data.get("answers") or {})
            if not finished:
                session.rollback()  # nothing to record: the read ends here
                return
            record_prompts(session, run.id, finished)
            state.save(session, row)
            session.commit()
    finally:
        lock.release()


def on_heartbeat(session: Session, run: Run, fields: dict) -> None:
    """The worker's heartbeat (engine/trainer/heartbeat.py: a status report with `fields.heartbeat` = {phase, step,
    time, sent?, detail?}): the phase a stalled run is stuck in, since when, and what it waits on."""
    beat = fields.get("heartbeat")
    phase = beat.get("phase") if isinstance(beat, dict) else None
    if not isinstance(phase, str) or not phase:
        return
    lock = state.run_lock(session, run.id)
    try:
        with write_lock(session):
            row = state.load(session, run.id)
            row.data["heartbeat"] = judge.heartbeat_of(phase, beat, received=state.clock())
            state.save(session, row)
    finally:
        lock.release()


def refresh_stalled(session: Session, run: Run, now: float | None = None) -> str | None:
    """Judge whether the run stalled (no step for stall_factor x its median step time), at `now` (default the
    clock). Commits; returns the Ray job an auto-stop asks to stop."""
    if run.status not in ACTIVE or run.source == "import":  # an import's wall times are its source run's: no clock
        return None
    lock = state.run_lock(session, run.id)
    try:
        with write_lock(session):
            row = state.load(session, run.id)
            judged = stall.judge(row.data.get("stall", {}), state.clock() if now is None else now,
                                 row.data.get("heartbeat"))
            if judged is None:
                session.rollback()  # nothing judged: the read ends here
                return None
            write(session, run, row, judge.advance_all(row, [judged]))
            session.commit()
            return session.info.pop(STOP_JOB, None)
    finally:
        lock.release()
