"""Dialect-specific INSERT ... ON CONFLICT (SQLite and PostgreSQL share the syntax), and the write lock."""
from __future__ import annotations

import threading
from contextlib import contextmanager

from sqlmodel import Session

# SQLite has one writer at a time; concurrent writers otherwise poll the database lock with sleeps (busy
# timeout), which costs throughput and latency. Ingest serialises its short transactions here instead.
_SQLITE_WRITES = threading.Lock()


def insert_for(session: Session, model):
    name = session.get_bind().dialect.name
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:  # pragma: no cover - other databases need their own upsert
        raise NotImplementedError(f"upsert is not implemented for {name}")
    return insert(model)


def in_lock_order(session: Session, rows: list, key=None) -> list:
    """`rows` sorted by their conflict key where concurrent writers lock rows (PostgreSQL): two batches that share
    rows then lock them in the same order, so the second waits for the first instead of the two deadlocking (a
    resend while the first send is still in flight). SQLite has one writer at a time: the rows as they are."""
    if session.get_bind().dialect.name == "sqlite":
        return rows
    return sorted(rows, key=key)


@contextmanager
def write_lock(session: Session):
    if session.get_bind().dialect.name == "sqlite":
        with _SQLITE_WRITES:
            yield
    else:
        yield
