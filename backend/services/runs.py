"""Run lifecycle: creation, status transitions (with their events), tokens, deletion."""
from __future__ import annotations

import hashlib
import hmac
import secrets
import shutil
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func
from sqlmodel import Session, select

from backend.models import (
    ACTIVE,
    TERMINAL,
    Artifact,
    Event,
    Experiment,
    LogLine,
    MetricPoint,
    Run,
    RunPublic,
    RunStatus,
    Sample,
)
from backend.models.common import utcnow
from backend.services.events import RUNS_CHANNEL, add_event, run_channel

SUMMARY_EXCLUDE = {"config", "resolved_config"}


def new_token() -> tuple[str, str]:
    token = secrets.token_urlsafe(32)
    return token, hash_token(token)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, token_hash: str) -> bool:
    return bool(token_hash) and hmac.compare_digest(hash_token(token), token_hash)


def summary(run: Run) -> dict[str, Any]:
    return RunPublic.model_validate(run).model_dump(mode="json", exclude=SUMMARY_EXCLUDE)


def announce(session: Session, run: Run, kind: str = "run") -> None:
    """Tell both feeds about the run's new state (call before commit)."""
    data = summary(run)
    add_event(session, run_channel(run.id), "status" if kind == "run" else kind, data)
    add_event(session, RUNS_CHANNEL, kind, data)


def experiment_by_name(session: Session, name: str) -> Experiment:
    found = session.exec(select(Experiment).where(Experiment.name == name)).first()
    if found is None:
        found = Experiment(name=name)
        session.add(found)
        session.flush()
    return found


def set_status(session: Session, run: Run, status: RunStatus, *, error: str | None = None,
               log_tail: str | None = None) -> bool:
    """Move a run to `status`. Terminal states stick (the first one wins); returns whether it changed."""
    if run.status in TERMINAL and status != run.status:
        return False
    if run.status == status and error is None:
        return False
    now = utcnow()
    if status == RunStatus.running and run.started_at is None:
        run.started_at = now
    if status in TERMINAL:
        run.finished_at = now
        run.eta_seconds = None
    run.status = status
    if error is not None:
        run.error = error
    if log_tail is not None:
        run.log_tail = log_tail
    session.add(run)
    announce(session, run)
    return True


def update_progress(run: Run, step: int | None, total: int | None) -> bool:
    changed = False
    if step is not None and (run.progress_step is None or step > run.progress_step):
        run.progress_step = step
        changed = True
    if total is not None and total != run.progress_total:
        run.progress_total = total
        changed = True
    if changed and run.started_at is not None and run.progress_step and run.progress_total:
        elapsed = (utcnow() - run.started_at).total_seconds()
        remaining = max(run.progress_total - run.progress_step, 0)
        run.eta_seconds = round(elapsed / run.progress_step * remaining, 1)
    return changed


def log_tail(session: Session, run_id: int, lines: int = 50) -> str:
    rows = session.exec(select(LogLine.text).where(LogLine.run_id == run_id)
                        .order_by(LogLine.id.desc()).limit(lines)).all()
    return "\n".join(reversed(rows))


def is_active(run: Run) -> bool:
    return run.status in ACTIVE


def delete_run(session: Session, run: Run, runs_dir: Path) -> None:
    """Rows first (explicitly, not trusting FK cascades on every backend), then the run's own directory."""
    run_id = run.id
    for model in (MetricPoint, Sample, LogLine, Artifact):
        session.exec(delete(model).where(model.run_id == run_id))
    session.exec(delete(Event).where(Event.channel == run_channel(run_id)))
    for child in session.exec(select(Run).where(Run.parent_id == run_id)).all():
        child.parent_id = None
        session.add(child)
    session.delete(run)
    add_event(session, RUNS_CHANNEL, "deleted", {"id": run_id})
    session.commit()
    directory = Path(run.run_dir) if run.run_dir else None
    if directory is not None and directory.resolve().parent == runs_dir.resolve() and directory.is_dir():
        shutil.rmtree(directory, ignore_errors=True)


def count_runs(session: Session, experiment_id: int) -> int:
    return session.exec(select(func.count()).select_from(Run).where(Run.experiment_id == experiment_id)).one()
