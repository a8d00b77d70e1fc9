"""verl's `file` logger (`trainer.logger=[...,file]`, path from `VERL_FILE_LOGGER_PATH`): one JSON object per
line, `{"step": N, "data": {"actor/pg_loss": 0.1, ...}}`, each step's metrics under verl's own names, which are
the engine's names too (`critic/score/mean`, `val-core/<source>/reward/mean@N`, `timing_s/gen`, ...). Newer verl
adds `elapsed_seconds` (seconds since the logger started), read as the points' wall time when present. verl
0.9.1 writes with orjson, which spells NaN and infinities `null`: a null value is read as NaN (a NaN loss).

A step that comes twice (files of a resumed run put one after the other) keeps its later line, as ingest does."""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from backend.imports.errors import BadFile
from backend.imports.jsonl import read_lines

MAX_KEY = 300  # metric_point.key
MAX_STEP = 2**62  # the API's bound on steps
SHAPE = 'each line of verl\'s file logger is {"step": N, "data": {"key": number, ...}}'


@dataclass
class StepLine:
    line: int
    step: int
    values: dict[str, float]  # numbers only (NaN / inf kept); what is not a number is counted in `skipped`
    elapsed: float | None = None


@dataclass
class Skipped:
    """Values that are not numbers (verl logs only numbers; a hand-added string or list), by key: the import's
    summary lists them rather than refusing the file."""

    keys: dict[str, int] = field(default_factory=dict)

    def add(self, key: str) -> None:
        if len(self.keys) < 100 or key in self.keys:
            self.keys[key] = self.keys.get(key, 0) + 1


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer past the float range
        return math.copysign(math.inf, value)


def read_steps(stream: IO[bytes], file: str, skipped: Skipped, field_name: str = "metrics") -> Iterator[StepLine]:
    """Each line's step and numbers; BadFile naming the first line that is not verl's shape."""
    for number, value in read_lines(stream, file, field_name):
        if not isinstance(value, dict):
            raise BadFile(file, f"a JSON {type(value).__name__}, not an object ({SHAPE})", line=number,
                          field=field_name)
        step = value.get("step")
        if "step" not in value:
            raise BadFile(file, f'no "step" ({SHAPE})', line=number, field=field_name)
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
            raise BadFile(file, f'"step" is {str(step)[:40]!s}, not a whole number from 0 to 2^62 ({SHAPE})',
                          line=number, field=field_name)
        data = value.get("data")
        if not isinstance(data, dict):
            what = "missing" if "data" not in value else f"a JSON {type(data).__name__}"
            raise BadFile(file, f'"data" is {what}, not an object ({SHAPE})', line=number, field=field_name)
        values: dict[str, float] = {}
        for key, raw in data.items():
            number_value = math.nan if raw is None else _number(raw)  # verl's orjson writes NaN as null
            if number_value is None or not key or len(key) > MAX_KEY:
                skipped.add(key[:MAX_KEY])
                continue
            values[key] = number_value
        elapsed = _number(value.get("elapsed_seconds"))
        yield StepLine(number, step, values, elapsed if elapsed is not None and math.isfinite(elapsed) else None)
