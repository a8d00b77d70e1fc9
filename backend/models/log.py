from __future__ import annotations

import math
from typing import Annotated

from pydantic import StringConstraints, field_validator
from sqlalchemy import Column, ForeignKey, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from backend.models.common import BigInt, Count, Num


class LogLineBase(SQLModel):
    source: str = Field(default="engine", max_length=20)  # job (Ray job output) | engine (dashboard logger)
    seq: int = Field(ge=0, sa_type=BigInt)  # line number within (run, source): makes ingest idempotent
    text: str = Field(sa_type=Text)
    time: float = 0.0


class LogLineIn(SQLModel):
    seq: Count
    text: str = Field(max_length=100_000)
    time: Num | None = None

    @field_validator("time")
    @classmethod
    def _finite_time(cls, value):
        if value is not None and not math.isfinite(value):
            raise ValueError("time must be a finite number of seconds")
        return value


class LogsIngest(SQLModel):
    # (sqlmodel's `regex=` is not applied under pydantic 2: the pattern is on the type)
    source: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,19}$")] = "engine"
    lines: list[LogLineIn]


class LogLine(LogLineBase, table=True):
    __tablename__ = "log_line"
    __table_args__ = (UniqueConstraint("run_id", "source", "seq", name="uq_log_line_position"),)
    id: int | None = Field(default=None, primary_key=True, sa_type=BigInt)
    run_id: int = Field(sa_column=Column(BigInt, ForeignKey("run.id", ondelete="CASCADE"), nullable=False,
                                         index=True))


class LogLinePublic(LogLineBase):
    id: int


class LogLinesPublic(SQLModel):
    data: list[LogLinePublic]
    count: int
