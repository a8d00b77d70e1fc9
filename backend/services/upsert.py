"""Dialect-specific INSERT ... ON CONFLICT (SQLite and PostgreSQL share the syntax)."""
from __future__ import annotations

from sqlmodel import Session


def insert_for(session: Session, model):
    name = session.get_bind().dialect.name
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:  # pragma: no cover - other databases need their own upsert
        raise NotImplementedError(f"upsert is not implemented for {name}")
    return insert(model)
