"""A run's tools: the ones its tool config declares and the ones its answers called (API models only; read from the
run's config and its samples' tool columns, nothing stored)."""
from __future__ import annotations

from sqlmodel import Field, SQLModel


class RunTool(SQLModel):
    name: str
    declared: bool = Field(description="named in the run's tool config (actor_rollout_ref.rollout.multi_turn."
                                       "tool_config_path), when the server can read that file")
    samples: int = Field(description="logged answers that called it (train and val)")


class RunTools(SQLModel):
    data: list[RunTool] = Field(description="by name")
    count: int
    tool_config_path: str | None = Field(default=None, description="the run's tool config, as its config names it")
    config_note: str | None = Field(default=None, description="why the declared tools are unknown (no such file "
                                                              "on the server, not a tool config), else null")
