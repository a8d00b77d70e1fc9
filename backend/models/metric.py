from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic import Field as PField
from pydantic_core import PydanticCustomError
from sqlalchemy import Column, Float, ForeignKey, String
from sqlmodel import Field, SQLModel

from backend.models.common import BigInt, NonFinite, Num, StepInt


class MetricPoint(SQLModel, table=True):
    """One value of one key at one step of one run; (run, key, step) is the key, so ingest is an upsert."""

    __tablename__ = "metric_point"
    run_id: int = Field(sa_column=Column(BigInt, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True))
    key: str = Field(sa_column=Column(String(300), primary_key=True))
    step: int = Field(sa_column=Column(BigInt, primary_key=True))
    value: float | None = Field(default=None, sa_column=Column(Float, nullable=True))  # NULL = NaN
    wall_time: float = Field(sa_column=Column(Float, nullable=False))


class MetricBucket(SQLModel, table=True):
    """Pre-aggregated points of one series (run, key): at each level, the points of steps
    [bucket << level, (bucket + 1) << level) summarised by their count, their min row, their max row and their
    first NaN row. Maintained on ingest (backend/services/metric_buckets.py); chart queries downsample from the
    level just finer than the chart's bucket width instead of reading every point."""

    __tablename__ = "metric_bucket"
    __table_args__ = {"sqlite_with_rowid": False}
    run_id: int = Field(sa_column=Column(BigInt, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True))
    level: int = Field(sa_column=Column(BigInt, primary_key=True))  # log2 of the bucket width in steps
    key: str = Field(sa_column=Column(String(300), primary_key=True))
    bucket: int = Field(sa_column=Column(BigInt, primary_key=True))
    n: int = Field(sa_column=Column(BigInt, nullable=False))
    min_step: int | None = Field(default=None, sa_column=Column(BigInt, nullable=True))
    min_value: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    min_wall: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    max_step: int | None = Field(default=None, sa_column=Column(BigInt, nullable=True))
    max_value: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    max_wall: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    nan_step: int | None = Field(default=None, sa_column=Column(BigInt, nullable=True))
    nan_wall: float | None = Field(default=None, sa_column=Column(Float, nullable=True))


class MetricPointIn(BaseModel):
    """Plain pydantic (validated in C): ingest is the hot path."""

    key: str = PField(min_length=1, max_length=300)
    step: StepInt
    value: Num | NonFinite | None  # JSON numbers, or "NaN" / "Infinity" / "-Infinity"
    wall_time: Num | None = PField(default=None, allow_inf_nan=False)  # epoch seconds; default: ingest time


class MetricSeriesIn(BaseModel):
    """Columnar form: one key, many steps (cheaper to send and to validate than one object per point). `steps`,
    `values` and `wall_times` (when given) have the same length: a 422 naming `series` otherwise."""

    key: str = PField(min_length=1, max_length=300)
    steps: list[StepInt]
    values: list[Num | NonFinite | None]
    wall_times: list[Annotated[Num, PField(allow_inf_nan=False)]] | None = None

    @model_validator(mode="after")
    def _same_lengths(self):
        if len(self.values) != len(self.steps) or (self.wall_times is not None
                                                    and len(self.wall_times) != len(self.steps)):
            raise ValueError("steps, values and wall_times must have the same length")
        return self


class MetricsIngest(BaseModel):
    """`points` (one object per point) and/or `series` (columnar); both count toward the per-request max.
    A body with neither, or with other keys (`{"step": 1, "data": {...}}`), is a 422 naming them."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    points: list[MetricPointIn] = []
    series: list[MetricSeriesIn] = []

    @model_validator(mode="after")
    def _points_or_series(self):
        if not self.model_fields_set:  # `{}`: nothing was meant (other keys were refused already)
            raise PydanticCustomError("missing", "points, series: give one or both")
        return self

    def size(self) -> int:
        return len(self.points) + sum(len(s.steps) for s in self.series)

    def rows(self, default_time: float):
        """(key, step, value, wall_time) for every point, in order; "NaN" and kin as floats."""
        for p in self.points:
            value = float(p.value) if isinstance(p.value, str) else p.value
            yield p.key, p.step, value, default_time if p.wall_time is None else p.wall_time
        for s in self.series:
            times = s.wall_times or [default_time] * len(s.steps)
            values = [float(v) if isinstance(v, str) else v for v in s.values]
            yield from zip([s.key] * len(s.steps), s.steps, values, times)


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
