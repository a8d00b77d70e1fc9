"""Server-sent events: one stream per run (metrics, samples, status, logs) and one for the runs list.
Each event's id is the feed's database id: reconnecting with `Last-Event-ID` (or `?last_event_id=`) resumes
right after it, with no gap. A new connection without one starts with a `hello` event carrying the
current id, then only new events."""
from __future__ import annotations

import asyncio
import json
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from sqlalchemy import func
from sqlmodel import Session, select
from sse_starlette import EventSourceResponse

from backend.api.deps import get_run_or_404
from backend.models import Event
from backend.services.events import RUNS_CHANNEL, run_channel

router = APIRouter(tags=["events"])

BATCH = 500


def _last_id(session: Session, channel: str) -> int:
    return session.exec(select(func.max(Event.id)).where(Event.channel == channel)).one() or 0


def _stream(request: Request, channel: str, last_event_id: int | None):
    engine, bus = request.app.state.engine, request.app.state.bus

    async def generate():
        waiter = bus.waiter()
        try:
            cursor = last_event_id
            if cursor is None:
                with Session(engine) as session:
                    cursor = _last_id(session, channel)
                yield {"event": "hello", "id": str(cursor), "data": json.dumps({"last_event_id": cursor})}
            while not await request.is_disconnected():
                waiter.clear()  # cleared before the query: a notify during it is not lost
                with Session(engine) as session:
                    rows = session.exec(select(Event).where(Event.channel == channel, Event.id > cursor)
                                        .order_by(Event.id).limit(BATCH)).all()
                for row in rows:
                    cursor = row.id
                    yield {"event": row.kind, "id": str(row.id), "data": json.dumps(row.data)}
                if len(rows) < BATCH:
                    try:
                        await asyncio.wait_for(waiter.wait(), timeout=1.0)
                    except asyncio.TimeoutError:
                        pass
        finally:
            bus.release(waiter)

    return EventSourceResponse(generate(), ping=15, headers={"X-Accel-Buffering": "no"})


# Event ids come from the database's 64-bit integers and will never reach 10^18: a resume point is at most 18 digits
# (a header, a query parameter), stated in the OpenAPI document and refused beyond it (a 422 naming it), so no
# number past the database's integers reaches the stream's query.
MAX_EVENT_ID = 10**18 - 1
ResumeQuery = Annotated[int | None, Query(ge=0, le=MAX_EVENT_ID, description=(
    "resume after this event id (what EventSource sends as Last-Event-ID); at most 10^18 - 1"))]
ResumeHeader = Annotated[str | None, Header(alias="Last-Event-ID", pattern=r"^[0-9]{0,18}$", description=(
    "resume after this event id (EventSource sends the last id it saw): at most 18 digits (empty: none); wins "
    "over `last_event_id`"))]
AccessToken = Annotated[str | None, Query(description="for EventSource, which can't send headers")]


def _resume_from(header: str | None, query: int | None) -> int | None:
    return int(header) if header else query


@router.get("/runs/events", summary="SSE: the runs list (created, status, progress, deleted)")
def stream_runs_events(request: Request, last_event_id: ResumeQuery = None,
                       last_event_id_header: ResumeHeader = None, access_token: AccessToken = None):
    return _stream(request, RUNS_CHANNEL, _resume_from(last_event_id_header, last_event_id))


@router.get("/runs/{run_id}/events", summary="SSE: one run's metrics, samples, status and log lines")
def stream_run_events(request: Request, run_id: int, last_event_id: ResumeQuery = None,
                      last_event_id_header: ResumeHeader = None, access_token: AccessToken = None):
    with Session(request.app.state.engine) as session:
        get_run_or_404(session, run_id)
    return _stream(request, run_channel(run_id), _resume_from(last_event_id_header, last_event_id))
