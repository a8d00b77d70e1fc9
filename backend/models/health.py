"""Run health: each alarm's state per run, the checks' running state, and the per-prompt learning-signal record
(backend/services/health/)."""
from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import Column, Float, ForeignKey, String, Text
from sqlmodel import Field, SQLModel

from backend.models.common import BigInt, JSONType

Severity = Literal["warning", "error"]
HealthStatus = Literal["ok", "warning", "error"]


class HealthAlarm(SQLModel, table=True):
    """One alarm of one run: firing since `since_step`, or cleared at `cleared_step`, with the numbers that
    triggered it. An alarm that never fired has no row (it is ok)."""

    __tablename__ = "health_alarm"
    run_id: int = Field(sa_column=Column(BigInt, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True))
    alarm_id: str = Field(sa_column=Column(String(400), primary_key=True))
    severity: str = Field(sa_column=Column(String(10), nullable=False))
    state: str = Field(sa_column=Column(String(10), nullable=False))  # firing | cleared
    title: str = Field(default="", sa_column=Column(Text, nullable=False))
    detail: str = Field(default="", sa_column=Column(Text, nullable=False))
    key: str | None = Field(default=None, sa_column=Column(String(300), nullable=True))
    since_step: int = Field(sa_column=Column(BigInt, nullable=False))
    cleared_step: int | None = Field(default=None, sa_column=Column(BigInt, nullable=True))
    values: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSONType, nullable=False))
    samples: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONType, nullable=True))
    updated_at: float = Field(default=0.0, sa_column=Column(Float, nullable=False))


class HealthState(SQLModel, table=True):
    """The checks' running state of one run (windows, streaks, tallies: what the next points need), so judging
    costs the new points only and survives a restart."""

    __tablename__ = "health_state"
    run_id: int = Field(sa_column=Column(BigInt, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True))
    checked_step: int | None = Field(default=None, sa_column=Column(BigInt, nullable=True))
    data: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSONType, nullable=False))


class HealthPrompt(SQLModel, table=True):
    """Per prompt of a run: how many of its GRPO groups (steps) were judged and how many had signal (answers
    scored differently). A prompt with groups and no signal has taught nothing at any step."""

    __tablename__ = "health_prompt"
    run_id: int = Field(sa_column=Column(BigInt, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True))
    prompt_index: int = Field(sa_column=Column(BigInt, primary_key=True))
    groups: int = Field(default=0, sa_column=Column(BigInt, nullable=False))
    with_signal: int = Field(default=0, sa_column=Column(BigInt, nullable=False))
    last_step: int = Field(default=0, sa_column=Column(BigInt, nullable=False))


class HealthSamples(SQLModel):
    step: int
    filter: str | None = None


class HealthAlarmPublic(SQLModel):
    id: str = Field(description="stable kind, e.g. kl-high; per key for nonfinite:<key>, per role for skipped:<role>")
    severity: Severity
    state: Literal["firing", "cleared"]
    title: str
    detail: str
    key: str | None = Field(default=None, description="the metric it reads, when one")
    since_step: int
    cleared_step: int | None = None
    values: dict[str, float] = Field(description="the numbers that triggered it")
    samples: HealthSamples | None = Field(default=None, description="the answers that show it")


class RunHealth(SQLModel):
    run_id: int
    status: HealthStatus = Field(description="the worst severity among firing alarms; ok when none fires")
    checked_step: int | None = Field(default=None, description="the newest step judged")
    alarms: list[HealthAlarmPublic]
    thresholds: dict[str, float]


class FiringAlarm(SQLModel):
    id: str
    severity: Severity
    title: str
    since_step: int


class HealthSummary(SQLModel):
    status: HealthStatus
    firing: list[str] = Field(description="the ids of the alarms firing now")
    alarms: list[FiringAlarm] = Field(default_factory=list, description="the same alarms with their severity, title "
                                      "and since_step (a badge each)")


class NoSignalPrompt(SQLModel):
    prompt_index: int
    groups: int = Field(description="steps at which its answers were judged as a group")
    last_step: int
    question: str
    answers: list[dict[str, Any]] = Field(description="its answers at last_step: response (first 500 characters) "
                                                      "and score")


class NoSignalPrompts(SQLModel):
    data: list[NoSignalPrompt]
    count: int
