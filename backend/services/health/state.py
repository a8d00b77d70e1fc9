"""A run's cached health state and its judge lock: the one place health keeps anything between batches.

The state is the run's health_state row (each check's memory, the alarm trackers, the newest step judged), read
and written with plain SQL: ingest's hot path (the ORM's bookkeeping would cost more than the checks).
SQLite: each database's states stay in memory between batches (a run's judge lock, held from the read to the
commit, lets one batch of it be judged at a time; this server is the file's one writer), saved with every batch;
a new server (a new engine) reads them back from the table. PostgreSQL reads the row, locked, every time."""
from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy import event as orm_event
from sqlalchemy.orm import Session as OrmSession
from sqlmodel import Session

from backend import json_codec

STOP_JOB = "rlstudio.health_stop_job"  # session.info: the Ray job an auto-stop asks the route to stop
HEALTH_CHECKS = "rlstudio.health_checks"  # session.info: False when the server judges nothing (RLSTUDIO_HEALTH_CHECKS)
TOUCHED = "rlstudio.health_touched"  # session.info: the runs whose cached state this transaction changed
CACHE_RUNS = 256
clock = time.time  # the server's clock, for when a step or a heartbeat arrived (tests plant old arrivals through it)


@dataclass
class State:
    """A run's health_state row."""

    run_id: int
    checked_step: int | None
    data: dict
    stored: bool


_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCKS: dict[tuple[int, int], threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def checks_on(session: Session) -> bool:
    return session.info.get(HEALTH_CHECKS, True)


def run_lock(session: Session, run_id: int) -> threading.Lock:
    """The run's judge lock, taken: one batch of a run judged at a time, from its state's read to its commit."""
    with _LOCKS_LOCK:
        lock = _LOCKS.setdefault((id(session.get_bind()), run_id), threading.Lock())
    lock.acquire()
    return lock


def load(session: Session, run_id: int) -> State:
    """The run's state (call with its judge lock held)."""
    bind = session.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    if sqlite:
        cache = _CACHES.setdefault(bind, OrderedDict())
        session.info.setdefault(TOUCHED, set()).add(run_id)
        found = cache.get(run_id)
        if found is not None:
            cache.move_to_end(run_id)
            return found
    conn, lock = session.connection(), ""
    if not sqlite:  # PostgreSQL: one judge per run at a time, on a row that exists (two first batches race)
        conn.exec_driver_sql(f"INSERT INTO health_state (run_id, checked_step, data) VALUES ({int(run_id)}, NULL, "
                             "CAST('{}' AS JSON)) ON CONFLICT (run_id) DO NOTHING")
        lock = " FOR UPDATE"
    found = conn.exec_driver_sql(
        f"SELECT checked_step, data FROM health_state WHERE run_id = {int(run_id)}{lock}").first()
    state = State(run_id, None, {}, False) if found is None else State(
        run_id, found[0], found[1] if isinstance(found[1], dict) else json_codec.loads(found[1]), True)
    if sqlite:
        cache[run_id] = state
        while len(cache) > CACHE_RUNS:
            cache.popitem(last=False)
    return state


def save(session: Session, state: State) -> None:
    sqlite = session.get_bind().dialect.name == "sqlite"
    mark, data = ("?", "?") if sqlite else ("%s", "CAST(%s AS JSON)")  # SQLite's JSON is text
    params = (state.checked_step, json_codec.dumps(state.data), state.run_id)
    conn = session.connection()
    if state.stored:
        conn.exec_driver_sql(f"UPDATE health_state SET checked_step = {mark}, data = {data} WHERE run_id = {mark}",
                             params)
    else:
        conn.exec_driver_sql(f"INSERT INTO health_state (checked_step, data, run_id) VALUES ({mark}, {data}, {mark})",
                             params)
        state.stored = True


def forget(session: Session, run_id: int) -> None:
    """The run's cached state is read again from the table next time (its judged batch was never stored)."""
    cache = _CACHES.get(session.get_bind())
    if cache is not None:
        cache.pop(run_id, None)


@orm_event.listens_for(OrmSession, "after_rollback")
def _forget_rolled_back(session: OrmSession) -> None:
    """A rolled-back transaction's judgements never happened: its runs' states are read again from the table."""
    touched = session.info.pop(TOUCHED, None)
    if touched:
        cache = _CACHES.get(session.get_bind())
        for run_id in touched:
            (cache or {}).pop(run_id, None)


@orm_event.listens_for(OrmSession, "after_commit")
def _kept(session: OrmSession) -> None:
    session.info.pop(TOUCHED, None)
