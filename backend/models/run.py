from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import field_validator, model_validator
from sqlalchemy import Column, ForeignKey
from sqlmodel import Field, SQLModel

from backend.models.common import BigInt, JSONType, UTCDateTime, clean_json, utcnow
from backend.models.health import HealthSummary


class RunStatus(str, Enum):
    queued = "queued"  # waiting in rlstudio's FIFO queue (concurrency limit)
    starting = "starting"  # submitted to Ray, the job is PENDING
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    lost = "lost"  # recorded as running but its Ray job no longer exists


ACTIVE = (RunStatus.queued, RunStatus.starting, RunStatus.running)
TERMINAL = (RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled, RunStatus.lost)


class RunBase(SQLModel):
    name: str = Field(default="", max_length=200)
    tags: list[str] = Field(default_factory=list, sa_type=JSONType)
    notes: str = Field(default="", max_length=100_000)


class RunCreate(SQLModel):
    """A run: a config (nested tree and/or verl-style `key=value` overrides, optionally on a preset),
    validated with the engine's schema. `launch=false` records a run driven from outside (a training
    command started by hand with the dashboard logger, like a wandb run): the response then carries the
    run's ingest token, once."""

    experiment_id: int | None = None
    experiment_name: str | None = Field(default=None, min_length=1, max_length=200)
    name: str = Field(default="", max_length=200)
    preset: str | None = Field(default=None, max_length=100)
    config: dict[str, Any] = Field(default_factory=dict)
    overrides: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    notes: str = Field(default="", max_length=100_000)
    launch: bool = True

    @model_validator(mode="before")
    @classmethod
    def _finite(cls, data):
        return clean_json(data) if isinstance(data, dict) else data

    @field_validator("tags")
    @classmethod
    def _tags_are_short(cls, tags: list[str]) -> list[str]:
        if any(not tag or len(tag) > 100 for tag in tags):
            raise ValueError("tags: each tag must be 1-100 characters")
        return tags


class RunUpdate(SQLModel):
    name: str | None = Field(default=None, max_length=200)
    tags: list[str] | None = None
    notes: str | None = Field(default=None, max_length=100_000)


class RunFork(SQLModel):
    """Fork: the parent's config with these edits (a nested tree and/or overrides) as a new run."""

    @model_validator(mode="before")
    @classmethod
    def _finite(cls, data):
        return clean_json(data) if isinstance(data, dict) else data

    name: str | None = Field(default=None, max_length=200)
    config: dict[str, Any] = Field(default_factory=dict)
    overrides: list[str] = Field(default_factory=list)
    tags: list[str] | None = None
    launch: bool = True


class RunStatusReport(SQLModel):
    """What the engine's dashboard logger reports with `log_status`."""

    status: str = Field(max_length=50)
    error: str | None = Field(default=None, max_length=100_000)
    fields: dict[str, Any] = Field(default_factory=dict)


class Run(RunBase, table=True):
    __table_args__ = {"sqlite_autoincrement": True}  # ids never reused after a delete (migration 0008)
    id: int | None = Field(default=None, primary_key=True, sa_type=BigInt)
    experiment_id: int = Field(sa_column=Column(BigInt, ForeignKey("experiment.id", ondelete="CASCADE"),
                                                nullable=False, index=True))
    status: RunStatus = Field(default=RunStatus.queued, index=True, max_length=20)
    source: str = Field(default="server", max_length=20)  # server (Ray job) | external (started by hand)
    preset: str | None = None
    config: dict[str, Any] = Field(default_factory=dict, sa_type=JSONType)  # what the user asked for
    resolved_config: dict[str, Any] = Field(default_factory=dict, sa_type=JSONType)  # the full validated config
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    progress_step: int | None = Field(default=None, sa_type=BigInt)
    progress_total: int | None = Field(default=None, sa_type=BigInt)
    eta_seconds: float | None = None
    error: str | None = None
    log_tail: str | None = None
    submission_id: str | None = Field(default=None, index=True)
    parent_id: int | None = Field(default=None, sa_column=Column(
        BigInt, ForeignKey("run.id", ondelete="SET NULL"), nullable=True))
    parent_relation: str | None = None  # fork | resume
    ingest_token_hash: str = Field(default="", max_length=128)
    run_dir: str = ""
    facts: dict[str, Any] = Field(default_factory=dict, sa_type=JSONType)  # what the engine reported at its start


class RunPublic(RunBase):
    id: int
    experiment_id: int
    status: RunStatus
    source: str
    preset: str | None
    config: dict[str, Any]
    resolved_config: dict[str, Any]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    progress_step: int | None
    progress_total: int | None
    eta_seconds: float | None
    error: str | None
    log_tail: str | None
    submission_id: str | None
    parent_id: int | None
    parent_relation: str | None
    facts: dict[str, Any] = Field(default_factory=dict, description=(
        "what the engine reported when the run started (its `started` status): e.g. `device`, `device_name`, "
        "`workers`, `roles`, `launcher`, `n_params` (the actor's parameters) and `n_trainable_params` (those that "
        "train: fewer than `n_params` with LoRA, equal in full fine-tuning), and for a run with a critic "
        "`critic_n_params` and `critic_n_trainable_params` (the same for the critic); empty until then"))


class RunCreated(RunPublic):
    ingest_token: str | None = None  # only for launch=false, only in this response


class RunSummary(RunPublic):
    """A run in the runs list, with its latest held-out score: what runs are compared by (the training batch's
    score is not)."""

    val_score: float | None = Field(default=None, description="the latest finite value of `val_score_key`")
    val_score_key: str | None = Field(default=None, description="the run's first `val-core/<source>/reward/mean@N` "
                                      "key (else its first `val-core/` key); null when it logged none")
    val_score_step: int | None = Field(default=None, description="the step of `val_score`")
    health: HealthSummary | None = Field(default=None, description="the run's health (GET /runs/{id}/health): its "
                                         "status and the ids of the alarms firing now")


class RunsPublic(SQLModel):
    data: list[RunSummary]
    count: int
