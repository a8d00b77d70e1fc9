from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, StringConstraints, WithJsonSchema, model_validator
from pydantic import Field as PField
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


def _preset_names(schema: dict[str, Any]) -> None:
    """The document names the presets there are (engine/configs/*.yaml, read when it is built) as a pattern: a
    generated client keeps `string` (a new preset needs no new client)."""
    from backend.services.run_config import preset_names

    names = "|".join(name.replace(".", "\\.") for name in preset_names())  # names: [A-Za-z0-9_.-]
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "string":
            branch["pattern"] = f"^({names})$"


def preset_field():
    return PField(default=None, max_length=100, json_schema_extra=_preset_names, description=(
        "a preset's name (GET /config/presets; the pattern lists them): the config starts from it"))


# the engine's override grammar (engine/config/overrides.py): `++` or `+` then a key of non-empty dotted parts, `=`
OVERRIDE_FORM = r"^(\+\+[^=.]+|\+?[^=.+][^=.]*)(\.[^=.]+)*=[\s\S]*$"


def _override_form(text: str) -> str:
    key = text.split("=", 1)[0]
    key = key.removeprefix("++") if key.startswith("++") else key.removeprefix("+")
    if "=" not in text or not key or not all(key.split(".")):
        raise ValueError(f"'{text[:100]}' is not of the form key=value (e.g. data.train_batch_size=32)")
    return text


# verl-style `key=value` (`+key=value` adds a key): the key and value are then checked against the engine's schema
# (GET /config/schema), a key or value it refuses being a 422 of type `config_error` naming the key.
Override = Annotated[str, AfterValidator(_override_form), WithJsonSchema({
    "type": "string", "pattern": OVERRIDE_FORM, "description": "key=value, +key=value"})]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=100)]  # each tag 1-100 characters
CONFIG_WORDS = ("a nested config tree, checked against the engine's schema (GET /config/schema): a key or value it "
                "refuses is a 422 of type `config_error` naming the key")


class RunCreate(SQLModel):
    """A run: a config (nested tree and/or verl-style `key=value` overrides, optionally on a preset),
    validated with the engine's schema. `launch=false` records a run driven from outside (a training
    command started by hand with the dashboard logger, like a wandb run): the response then carries the
    run's ingest token, once."""

    experiment_id: int | None = Field(default=None, description=(
        "an existing experiment's id (else a 422 naming it); unset: `experiment_name`"))
    experiment_name: str | None = Field(default=None, min_length=1, max_length=200, description=(
        "the experiment by name, made when new (default `default`); `experiment_id` wins"))
    name: str = Field(default="", max_length=200)
    preset: str | None = preset_field()
    config: dict[str, Any] = Field(default_factory=dict, description=CONFIG_WORDS)
    overrides: list[Override] = Field(default_factory=list)
    tags: list[Tag] = Field(default_factory=list)
    notes: str = Field(default="", max_length=100_000)
    launch: bool = True

    @model_validator(mode="before")
    @classmethod
    def _finite(cls, data):
        return clean_json(data) if isinstance(data, dict) else data



class RunUpdate(SQLModel):
    name: str | None = Field(default=None, max_length=200)
    tags: list[Tag] | None = None
    notes: str | None = Field(default=None, max_length=100_000)


class RunFork(SQLModel):
    """Fork: the parent's config with these edits (a nested tree and/or overrides) as a new run."""

    @model_validator(mode="before")
    @classmethod
    def _finite(cls, data):
        return clean_json(data) if isinstance(data, dict) else data

    name: str | None = Field(default=None, max_length=200)
    config: dict[str, Any] = Field(default_factory=dict, description=CONFIG_WORDS)
    overrides: list[Override] = Field(default_factory=list)
    tags: list[Tag] | None = None
    launch: bool = True


EngineStatus = Literal["running", "started", "resumed", "succeeded", "finished", "success", "failed", "error",
                       "cancelled"]


class RunStatusReport(SQLModel):
    """What the engine's dashboard logger reports with `log_status`."""

    status: EngineStatus = Field(description="what the engine's `log_status` says: running, started and resumed "
                                 "mean running; succeeded, finished, success; failed, error; cancelled")
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


class RunRef(SQLModel):
    id: int
    name: str
    status: RunStatus


class RunQueue(SQLModel):
    """Why a run has not started yet (GET /runs/{id}/queue): its place in rlstudio's queue, the runs queued ahead of
    it, the runs holding the concurrency limit, and the same in words."""

    run_id: int
    status: RunStatus
    waiting: bool = Field(description="queued or starting: not running yet")
    position: int | None = Field(default=None, description="its place among the queued runs, 1 = next to start; "
                                 "null unless queued")
    ahead: list[RunRef] = Field(default_factory=list, description="the queued runs that start before it")
    in_flight: list[RunRef] = Field(default_factory=list, description="the server's runs starting or running now: "
                                    "they hold the limit")
    max_concurrent_runs: int = Field(description="RLSTUDIO_MAX_CONCURRENT_RUNS: runs starting or running at once")
    dispatch: bool = Field(description="whether this server launches runs at all (RLSTUDIO_DISPATCH)")
    reason: str | None = Field(default=None, description="why it waits and for what, in words; null when it "
                               "does not wait")
