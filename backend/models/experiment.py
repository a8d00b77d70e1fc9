from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from backend.models.common import BigInt, UTCDateTime, utcnow


class ExperimentBase(SQLModel):
    name: str = Field(min_length=1, max_length=200, index=True, unique=True)
    description: str | None = Field(default=None, max_length=10_000)


class ExperimentCreate(ExperimentBase):
    pass


class ExperimentUpdate(SQLModel):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=10_000)


class Experiment(ExperimentBase, table=True):
    __table_args__ = {"sqlite_autoincrement": True}  # ids never reused after a delete (migration 0008)
    id: int | None = Field(default=None, primary_key=True, sa_type=BigInt)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class ExperimentPublic(ExperimentBase):
    id: int
    created_at: datetime
    run_count: int = 0


class ExperimentsPublic(SQLModel):
    data: list[ExperimentPublic]
    count: int
