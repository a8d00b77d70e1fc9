"""The live feed. Every change is written as an `Event` row in the same transaction as the data it
announces, so its id (monotonic, from the database) is what SSE clients resume from; after the commit
`bus.notify()` wakes the streams of this process at once (a stream also polls every second, so writers
in another process are seen too). Request sessions do that by themselves (`wake_on_commit`).

A stream resumes after the highest id it has sent, so ids must become visible in id order. SQLite has one writer at
a time. PostgreSQL hands out ids from a sequence when a row is inserted and commits transactions in any order: an
id 10 committed after an id 11 that a stream has already sent would never reach it. There the events of a
transaction are inserted when it commits, after its other writes, under a transaction-scoped advisory lock: ids
are handed out in commit order, and the lock's holder waits for nothing but its own commit."""
from __future__ import annotations

import asyncio
import time
from typing import Any

from sqlalchemy import event as orm_event
from sqlalchemy import text
from sqlalchemy.orm import Session as OrmSession
from sqlmodel import Session

from backend import json_codec
from backend.models import Event


def run_channel(run_id: int) -> str:
    return f"run:{run_id}"


RUNS_CHANNEL = "runs"


PENDING = "rlstudio.pending_events"
EVENT_LOCK = 0x726C73747564696F  # pg_advisory_xact_lock's key: "rlstudio"


def add_event(session: Session, channel: str, kind: str, data: dict[str, Any]) -> None:
    event = Event(channel=channel, kind=kind, data=data, time=time.time())
    if session.get_bind().dialect.name == "postgresql":
        session.info.setdefault(PENDING, []).append(event)  # inserted at commit (_insert_in_commit_order)
        session.info["wrote_events"] = True
    else:
        session.add(event)


@orm_event.listens_for(OrmSession, "before_commit")
def _insert_in_commit_order(session: OrmSession) -> None:
    pending = session.info.pop(PENDING, None)
    if not pending:
        return
    session.flush()  # the transaction's other writes (and their row locks) before the lock
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": EVENT_LOCK})
    session.add_all(pending)
    session.flush()


@orm_event.listens_for(OrmSession, "after_transaction_end")
def _drop_pending(session: OrmSession, transaction) -> None:
    if transaction.parent is None:  # rolled back or closed without a commit: its events never happened
        session.info.pop(PENDING, None)


def insert_event(session: Session, channel: str, kind: str, data: dict[str, Any]) -> None:
    """add_event() as one plain INSERT on SQLite (the ORM's flush costs ~0.4 ms a request on the metric ingest
    path); the same row, and the commit still wakes the streams."""
    if session.get_bind().dialect.name != "sqlite":
        add_event(session, channel, kind, data)
        return
    session.connection().exec_driver_sql("INSERT INTO event (channel, kind, data, time) VALUES (?, ?, ?, ?)",
                                         (channel, kind, json_codec.dumps(data), time.time()))
    session.info["wrote_events"] = True  # what wake_on_commit's before_flush hook notes for an added Event


def wake_on_commit(session: Session, bus: EventBus) -> None:
    """After each commit of `session` that wrote feed events, wake this process's streams: one place for
    every route and service, instead of a notify after each write."""

    def noted(sess: Session, _context, _instances) -> None:
        if any(isinstance(obj, Event) for obj in sess.new):
            sess.info["wrote_events"] = True

    def committed(sess: Session) -> None:
        if sess.info.pop("wrote_events", False):
            bus.notify()

    def rolled_back(sess: Session) -> None:
        sess.info.pop("wrote_events", None)

    orm_event.listen(session, "before_flush", noted)
    orm_event.listen(session, "after_commit", committed)
    orm_event.listen(session, "after_rollback", rolled_back)


class EventBus:
    """Wakes waiting SSE streams; notify() is safe to call from worker threads."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: set[asyncio.Event] = set()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def waiter(self) -> asyncio.Event:
        event = asyncio.Event()
        self._waiters.add(event)
        return event

    def release(self, event: asyncio.Event) -> None:
        self._waiters.discard(event)

    def notify(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake()
        else:
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        for event in list(self._waiters):
            event.set()


def prune(engine, older_than_s: float) -> int:
    """Drop feed events older than the retention (the data they announced stays)."""
    from sqlalchemy import delete

    with Session(engine) as session:
        result = session.exec(delete(Event).where(Event.time < time.time() - older_than_s))
        session.commit()
        return result.rowcount or 0


async def prune_forever(engine, older_than_s: float, every_s: float = 600.0) -> None:
    while True:
        await asyncio.to_thread(prune, engine, older_than_s)
        await asyncio.sleep(every_s)
