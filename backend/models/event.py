from __future__ import annotations

from typing import Any

from sqlmodel import Field, SQLModel

from backend.models.common import BigInt, JSONType


class Event(SQLModel, table=True):
    """The live feed: every change a browser may want, with a monotonically increasing id that SSE
    clients resume from (`Last-Event-ID`). channel = `run:<id>` or `runs` (the runs list)."""

    id: int | None = Field(default=None, primary_key=True, sa_type=BigInt)
    channel: str = Field(max_length=40, index=True)
    kind: str = Field(max_length=20)  # metrics | samples | status | logs | run | deleted
    data: dict[str, Any] = Field(default_factory=dict, sa_type=JSONType)
    time: float = 0.0
