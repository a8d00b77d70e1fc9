from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, ForeignKey, UniqueConstraint
from sqlmodel import Field, SQLModel

from backend.models.common import BigInt, UTCDateTime, utcnow


class ArtifactBase(SQLModel):
    kind: str = Field(max_length=20)  # checkpoint | model | file
    path: str = Field(max_length=1000)  # relative to the run's directory
    step: int | None = Field(default=None, sa_type=BigInt)
    size_bytes: int = Field(default=0, sa_type=BigInt)


class Artifact(ArtifactBase, table=True):
    __table_args__ = (UniqueConstraint("run_id", "path", name="uq_artifact_path"),)
    id: int | None = Field(default=None, primary_key=True, sa_type=BigInt)
    run_id: int = Field(sa_column=Column(BigInt, ForeignKey("run.id", ondelete="CASCADE"), nullable=False,
                                         index=True))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class ArtifactPublic(ArtifactBase):
    id: int
    run_id: int
    created_at: datetime


class ArtifactsPublic(SQLModel):
    data: list[ArtifactPublic]
    count: int
