"""A run's log lines: ingest (the run's token or the API token) and reading them back."""
from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from backend.api.deps import IngestRunDep, SessionDep, SettingsDep, get_run_or_404
from backend.api.errors import ErrorMessage
from backend.models import IngestResult, LogLinePublic, LogLinesPublic, LogsIngest
from backend.services import logs

router = APIRouter(tags=["logs"])
ingest_router = APIRouter(tags=["logs"])  # authenticated by the run's ingest token or the API token


@ingest_router.post("/runs/{run_id}/logs", response_model=IngestResult,
                    responses={413: {"model": ErrorMessage,
                                     "description": "more than RLSTUDIO_MAX_LOG_LINES_PER_REQUEST (default 5,000)"}})
def ingest_logs(run: IngestRunDep, session: SessionDep, settings: SettingsDep, body: LogsIngest):
    """Log lines, idempotent on (run, source, seq)."""
    if len(body.lines) > settings.max_log_lines_per_request:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                            f"lines: {len(body.lines)} in one request; the maximum is "
                            f"{settings.max_log_lines_per_request}.")
    now = time.time()
    accepted = logs.insert_lines(session, run.id, body.source, [(ln.seq, ln.text, ln.time or now) for ln in body.lines])
    return IngestResult(accepted=accepted)


@router.get("/runs/{run_id}/logs", response_model=LogLinesPublic)
def list_logs(session: SessionDep, run_id: int,
              tail: Annotated[int | None, Query(ge=1, le=10_000, description="the last N lines")] = None,
              source: str | None = None,
              after_id: Annotated[int | None, Query(ge=0, description="lines after this id")] = None,
              skip: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=10_000)] = 1000):
    """Paged history in order (`skip`/`limit`, or `after_id` to follow), or the last `tail` lines."""
    get_run_or_404(session, run_id)
    rows, count = logs.list_lines(session=session, run_id=run_id, source=source, after_id=after_id, tail=tail,
                                  skip=skip, limit=limit)
    return LogLinesPublic(data=[LogLinePublic.model_validate(r) for r in rows], count=count)
