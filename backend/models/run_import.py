"""What an import answers: the run it made and what went into it."""
from __future__ import annotations

from sqlmodel import Field, SQLModel

from backend.models.run import RunPublic


class RunImported(SQLModel):
    run: RunPublic
    lines: int = Field(description="lines of the metrics file read (verl); 0 for TensorBoard")
    steps: int = Field(description="distinct steps with metrics")
    points: int = Field(description="metric points stored")
    samples: dict[str, int] = Field(default_factory=dict, description="answers stored, by split (train, val)")
    skipped_values: dict[str, int] = Field(default_factory=dict, description=(
        "values that are not numbers (verl) or summaries that are not scalars (TensorBoard), by key: left out"))
    notes: list[str] = Field(default_factory=list)
