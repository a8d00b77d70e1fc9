from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator
from sqlalchemy import Column, ForeignKey, Index, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from backend.models.common import BigInt, Count, Int64, JSONType, Num, StepInt, clean_json
from backend.models.trajectory import Turn, TurnIn, lift_from_extras

Split = Literal["train", "val"]


class SampleBase(SQLModel):
    step: int = Field(ge=0, sa_type=BigInt)
    split: Split = Field(default="train", sa_type=Text)
    # Position of the sample among its step's samples of that split: with (run, split, step) it makes
    # ingest idempotent. The dashboard logger numbers them.
    sample_index: int = Field(ge=0, sa_type=BigInt)
    prompt_index: int | None = Field(default=None, sa_type=BigInt)
    group_uid: str | None = Field(default=None, max_length=200)
    prompt: str = Field(default="", sa_type=Text)
    response: str = Field(default="", sa_type=Text)
    score: float | None = None
    reward: float | None = None
    ground_truth: str | None = Field(default=None, sa_type=Text)
    data_source: str | None = Field(default=None, max_length=200)
    tokens: list[str] | None = Field(default=None, sa_type=JSONType)
    old_log_probs: list[float | None] | None = Field(default=None, sa_type=JSONType)
    ref_log_probs: list[float | None] | None = Field(default=None, sa_type=JSONType)
    advantages: list[float | None] | None = Field(default=None, sa_type=JSONType)
    values: list[float | None] | None = Field(default=None, sa_type=JSONType)
    extras: dict[str, Any] = Field(default_factory=dict, sa_type=JSONType)
    # multi-turn rollouts (null for single-turn answers): the conversation, and per token (over `tokens`,
    # which then run over the whole trajectory) whether the loss saw it (1: the model's, 0: tool answers)
    turns: list[Turn] | None = Field(default=None, sa_type=JSONType)
    loss_mask: list[int] | None = Field(default=None, sa_type=JSONType)
    # asynchronous training (issue 29): the weights' version (actor updates applied) that produced each token, over
    # `tokens`; the answer's oldest and newest version; verl's staleness at the trained step s (which trains on
    # version s - 1): staleness = (s - 1) - newest, staleness_worst = (s - 1) - oldest. Null: not recorded.
    policy_versions: list[int] | None = Field(default=None, sa_type=JSONType)
    policy_version_min: int | None = Field(default=None, sa_type=BigInt)
    policy_version_max: int | None = Field(default=None, sa_type=BigInt)
    staleness: int | None = Field(default=None, sa_type=BigInt)
    staleness_worst: int | None = Field(default=None, sa_type=BigInt)


def derive_versions(data: dict) -> dict:
    """Fill the oldest/newest version and the staleness a sender left out from `policy_versions` and the step
    (verl's definitions), and refuse versions that contradict each other, naming the field."""
    versions, tokens = data.get("policy_versions"), data.get("tokens")
    if isinstance(versions, list) and versions and all(isinstance(v, int) and not isinstance(v, bool)
                                                       for v in versions):
        _default(data, "policy_version_min", min(versions))
        _default(data, "policy_version_max", max(versions))
        if isinstance(tokens, list) and len(versions) != len(tokens):
            raise ValueError(f"policy_versions: {len(versions)} values for {len(tokens)} tokens; one version per token")
    low, high, step = data.get("policy_version_min"), data.get("policy_version_max"), data.get("step")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        raise ValueError(f"policy_version_min ({low}) is above policy_version_max ({high}); the oldest version "
                         "comes first")
    if isinstance(step, int):
        if isinstance(high, int):
            _default(data, "staleness", step - 1 - high)
        if isinstance(low, int):
            _default(data, "staleness_worst", step - 1 - low)
    return data


def _default(data: dict, key: str, value: int) -> None:
    if data.get(key) is None:
        data[key] = value


class SampleIn(SampleBase):
    """One answer as a logger sends it. Rules between fields (a 422 naming the sample otherwise): `policy_versions`
    and `loss_mask` have one value per token (as long as `tokens`), `policy_version_min` <= `policy_version_max`
    (each defaults to the versions' oldest / newest), and each turn's `start` <= `end` <= the number of `tokens`.
    `extras.turns` and `extras.loss_mask` (older loggers) are read as `turns` and `loss_mask`, by their rules."""

    # the same fields as stored, numbers strictly (no true/false or numeric strings)
    step: StepInt
    sample_index: Count
    prompt_index: Int64 | None = None
    score: Num | None = None
    reward: Num | None = None
    old_log_probs: list[Num | None] | None = None
    ref_log_probs: list[Num | None] | None = None
    advantages: list[Num | None] | None = None
    values: list[Num | None] | None = None
    loss_mask: list[Literal[0, 1]] | None = None
    turns: list[TurnIn] | None = None
    # a version counts the actor's updates, as a step does: 0..2^62 (the staleness derived from them then fits)
    policy_versions: list[StepInt] | None = None
    policy_version_min: StepInt | None = None
    policy_version_max: StepInt | None = None
    staleness: Int64 | None = None
    staleness_worst: Int64 | None = None

    @model_validator(mode="before")
    @classmethod
    def _finite(cls, data):
        return derive_versions(lift_from_extras(clean_json(data))) if isinstance(data, dict) else data


class SamplesIngest(SQLModel):
    samples: list[SampleIn]


class Sample(SampleBase, table=True):
    __table_args__ = (UniqueConstraint("run_id", "split", "step", "sample_index", name="uq_sample_position"),
                      Index("ix_sample_run_prompt", "run_id", "prompt_index"))
    id: int | None = Field(default=None, primary_key=True, sa_type=BigInt)
    run_id: int = Field(sa_column=Column(BigInt, ForeignKey("run.id", ondelete="CASCADE"), nullable=False))
    wall_time: float = 0.0
    # derived from `turns` at ingest (backend/models/trajectory.py `summary`), for the filters
    num_turns: int | None = Field(default=None, sa_type=BigInt)
    tool_names: str | None = Field(default=None, sa_type=Text)
    tool_error: bool | None = None


class SamplePublic(SampleBase):
    id: int
    run_id: int
    wall_time: float
    num_turns: int | None = Field(default=None, description="multi-turn: the prompt, each model turn and each "
                                  "tool answer (the engine's num_turns); null for single-turn answers")
    tool_error: bool | None = Field(default=None, description="multi-turn: some tool call failed")


class SamplesPublic(SQLModel):
    data: list[SamplePublic]
    count: int


class SampleAnswer(SQLModel):
    """An answer without its prompt and per-token arrays: what the health checks read."""

    id: int
    run_id: int
    step: int
    split: str
    sample_index: int
    response: str
    tokens: list[str] | None = None
    score: float | None = None


class SampleAnswers(SQLModel):
    data: list[SampleAnswer]
    count: int


class SampleStep(SQLModel):
    step: int
    split: str
    count: int
    mean_score: float | None


class SampleSteps(SQLModel):
    data: list[SampleStep]
    count: int


class SampleRow(SQLModel):
    """One answer as a table row: the question but not the whole prompt, no per-token arrays (the dense table,
    "What changed")."""

    id: int
    step: int
    split: str
    sample_index: int
    prompt_index: int | None = None
    group_uid: str | None = None
    data_source: str | None = None
    score: float | None = None
    advantage: float | None = Field(default=None, description="mean over the response's tokens")
    length: int = Field(description="response tokens (characters when the run logged no tokens)")
    first_line: str = Field(description="the answer's first non-empty line, at most 200 characters")
    question: str = Field(description="the prompt's last user turn without the chat template's tokens "
                          "(the prompt itself when it has none), on one line, at most 200 characters")
    rollout_diff_max: float | None = Field(
        default=None, description="largest |rollout - actor log-prob| over the answer's tokens (a vLLM rollout's "
        "extras.rollout_log_probs against old_log_probs); null when the run logged no rollout log-probs")
    num_turns: int | None = Field(default=None, description="multi-turn answers: turns, the prompt included")
    tools: list[str] | None = Field(default=None, description="multi-turn answers: the tools called")
    tool_error: bool | None = None
    policy_version_min: int | None = Field(default=None, description="asynchronous runs: the answer's oldest "
                                           "policy version (null when the run recorded none)")
    policy_version_max: int | None = Field(default=None, description="its newest policy version")
    staleness: int | None = Field(default=None, description="verl's trajectory staleness at the trained step: "
                                  "(step - 1) - newest version (0: on-policy)")


class SampleRows(SQLModel):
    data: list[SampleRow]
    count: int = Field(description="rows matching the filters (data holds at most `limit` of them)")


class StepOverlap(SQLModel):
    run_id: int
    step: int
    split: str
    shared_prompts: int


class StepOverlaps(SQLModel):
    """Steps that answered some of the same prompts as a given step, nearest first."""

    prompts: int = Field(description="distinct prompts of the given step")
    data: list[StepOverlap]
