"""Dependencies the routes share: the session, the settings, authentication, the run being addressed.

The ones without I/O are `async def`: FastAPI runs a plain `def` dependency in a worker thread, a hop that
costs ~0.15 ms of CPU (more on a loaded machine), several times per request on the ingest hot path."""
from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request, status
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from backend.models import Run
from backend.services.events import wake_on_commit
from backend.services.health import HEALTH_CHECKS
from backend.services.runs import token_matches
from backend.settings import Settings


def get_session(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine, expire_on_commit=False) as session:
        wake_on_commit(session, request.app.state.bus)  # a commit with feed events wakes the SSE streams
        session.info[HEALTH_CHECKS] = request.app.state.settings.health_checks
        yield session


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    # EventSource cannot send headers: the SSE routes also take ?access_token= (redacted from access logs).
    if request.url.path.endswith("/events"):
        return request.query_params.get("access_token")
    return None


def _is_api_token(settings: Settings, token: str | None) -> bool:
    expected = settings.api_token.get_secret_value() if settings.api_token else None
    return bool(expected and token and hmac.compare_digest(token.encode(), expected.encode()))


async def require_user(request: Request) -> None:
    """With RLSTUDIO_API_TOKEN set, `Authorization: Bearer <token>` is required."""
    settings: Settings = request.app.state.settings
    if settings.api_token is None:
        return
    token = _bearer(request)
    if token is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Missing 'Authorization: Bearer <token>' header.",
                            headers={"WWW-Authenticate": "Bearer"})
    if not _is_api_token(settings, token):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Invalid API token.")


def get_run_or_404(session: Session, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"Run {run_id} not found.")
    return run


def ingest_run(request: Request, session: SessionDep, run_id: Annotated[int, Path(ge=1)]) -> Run:
    """The run an ingest request writes to. Accepts the API token or this run's own ingest token; a
    token presented for another run is refused even with authentication off (a run writes only to itself)."""
    settings: Settings = request.app.state.settings
    token = _bearer(request)
    run = get_run_or_404(session, run_id)
    if token is None:
        if settings.api_token is None:
            return run
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Missing 'Authorization: Bearer <token>' header.",
                            headers={"WWW-Authenticate": "Bearer"})
    if _is_api_token(settings, token) or token_matches(token, run.ingest_token_hash):
        return run
    raise HTTPException(status.HTTP_403_FORBIDDEN, f"This token may not write to run {run_id}.")


IngestRunDep = Annotated[Run, Depends(ingest_run)]


async def ingest_session(request: Request, run_id: Annotated[int, Path(ge=1)]) -> AsyncIterator[tuple[Session, Run]]:
    """SessionDep + IngestRunDep (same checks, same errors) in one worker-thread hop instead of three, for the
    metric ingest: a training run's logger sends one small request per step."""
    session = Session(request.app.state.engine, expire_on_commit=False)  # no I/O until first used
    try:
        wake_on_commit(session, request.app.state.bus)
        session.info[HEALTH_CHECKS] = request.app.state.settings.health_checks
        yield session, await run_in_threadpool(ingest_run, request, session, run_id)
    finally:
        session.close()


IngestSessionDep = Annotated[tuple[Session, Run], Depends(ingest_session)]

