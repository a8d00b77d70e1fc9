from __future__ import annotations

from pydantic import BaseModel
from pydantic import Field as PField
from sqlalchemy import Column, Float, ForeignKey, Integer, String
from sqlmodel import Field, SQLModel


class MetricPoint(SQLModel, table=True):
    """One value of one key at one step of one run; (run, key, step) is the key, so ingest is an upsert."""

    __tablename__ = "metric_point"
    run_id: int = Field(sa_column=Column(Integer, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True))
    key: str = Field(sa_column=Column(String(300), primary_key=True))
    step: int = Field(sa_column=Column(Integer, primary_key=True))
    value: float | None = Field(default=None, sa_column=Column(Float, nullable=True))  # NULL = NaN
    wall_time: float = Field(sa_column=Column(Float, nullable=False))


class MetricPointIn(BaseModel):
    """Plain pydantic (validated in C): ingest is the hot path."""

    key: str = PField(min_length=1, max_length=300)
    step: int = PField(ge=0, le=2**62)
    value: float | None  # JSON numbers, or "NaN" / "Infinity" / "-Infinity"
    wall_time: float | None = PField(default=None, allow_inf_nan=False)  # epoch seconds; default: ingest time


class MetricsIngest(BaseModel):
    points: list[MetricPointIn]


class IngestResult(SQLModel):
    accepted: int


class MetricSeries(SQLModel):
    """One run's values of one key, in step order; downsampled when `downsampled` is true."""

    run_id: int
    key: str
    steps: list[int]
    values: list[float | str | None]
    wall_times: list[float]
    total_points: int
    downsampled: bool


class MetricSeriesList(SQLModel):
    data: list[MetricSeries]
    count: int


class MetricKeys(SQLModel):
    data: list[str]
    count: int


class LatestMetric(SQLModel):
    key: str
    step: int
    value: float | str | None
    wall_time: float


class LatestMetrics(SQLModel):
    data: list[LatestMetric]
    count: int
