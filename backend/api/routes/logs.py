from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, status
from sqlalchemy import func
from sqlmodel import select

from backend.api.deps import IngestRunDep, SessionDep, SettingsDep, check_body_size, get_run_or_404
from backend.models import IngestResult, LogLine, LogLinePublic, LogLinesPublic, LogsIngest, RunStatus, RunStatusReport
from backend.services.logs import insert_lines
from backend.services.runs import announce, log_tail, set_status, update_progress

router = APIRouter(tags=["logs"])
ingest_router = APIRouter(tags=["logs"])  # authenticated by the run's ingest token or the API token

ENGINE_STATUS = {"running": RunStatus.running, "started": RunStatus.running, "resumed": RunStatus.running,
                 "succeeded": RunStatus.succeeded,
                 "finished": RunStatus.succeeded, "success": RunStatus.succeeded, "failed": RunStatus.failed,
                 "error": RunStatus.failed, "cancelled": RunStatus.cancelled}


@ingest_router.post("/runs/{run_id}/logs", response_model=IngestResult, dependencies=[Depends(check_body_size)],
             responses={413: {"description": "more than RLSTUDIO_MAX_LOG_LINES_PER_REQUEST (default 5,000)"}})
def ingest_logs(request_run: IngestRunDep, session: SessionDep, settings: SettingsDep, body: LogsIngest):
    """Log lines, idempotent on (run, source, seq)."""
    if len(body.lines) > settings.max_log_lines_per_request:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                            f"lines: {len(body.lines)} in one request; the maximum is "
                            f"{settings.max_log_lines_per_request}.")
    now = time.time()
    accepted = insert_lines(session, request_run.id, body.source,
                            [(ln.seq, ln.text, ln.time or now) for ln in body.lines])
    bus = session.info.get("bus")
    if bus is not None:
        bus.notify()
    return IngestResult(accepted=accepted)


@ingest_router.post("/runs/{run_id}/status", response_model=IngestResult)
def report_run_status(request_run: IngestRunDep, session: SessionDep, body: RunStatusReport):
    """The engine's `log_status`: running / succeeded / failed (with `error`). Terminal states stick."""
    mapped = ENGINE_STATUS.get(body.status.lower())
    if mapped is None:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            detail=[{"loc": ["body", "status"], "type": "value_error",
                                     "msg": f"status: '{body.status}' is not one of {', '.join(ENGINE_STATUS)}."}])
    run = session.merge(request_run)
    step, total = body.fields.get("step"), body.fields.get("total_steps")
    if update_progress(run, step if isinstance(step, int) else None, total if isinstance(total, int) else None):
        announce(session, run, kind="progress")
    tail = log_tail(session, run.id) if mapped == RunStatus.failed else None
    changed = set_status(session, run, mapped, error=body.error, log_tail=tail)
    session.commit()
    bus = session.info.get("bus")
    if bus is not None:
        bus.notify()
    return IngestResult(accepted=int(changed))


@router.get("/runs/{run_id}/logs", response_model=LogLinesPublic)
def list_logs(session: SessionDep, run_id: int,
              tail: Annotated[int | None, Query(ge=1, le=10_000, description="the last N lines")] = None,
              source: str | None = None,
              after_id: Annotated[int | None, Query(ge=0, description="lines after this id")] = None,
              skip: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=10_000)] = 1000):
    """Paged history in order (`skip`/`limit`, or `after_id` to follow), or the last `tail` lines."""
    get_run_or_404(session, run_id)
    stmt = select(LogLine).where(LogLine.run_id == run_id)
    if source:
        stmt = stmt.where(LogLine.source == source)
    if after_id is not None:
        stmt = stmt.where(LogLine.id > after_id)
    count = session.exec(select(func.count()).select_from(stmt.subquery())).one()
    if tail is not None:
        rows = list(reversed(session.exec(stmt.order_by(LogLine.id.desc()).limit(tail)).all()))
    else:
        rows = session.exec(stmt.order_by(LogLine.id).offset(skip).limit(limit)).all()
    return LogLinesPublic(data=[LogLinePublic.model_validate(r) for r in rows], count=count)
