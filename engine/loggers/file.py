"""File logger: JSON lines under trainer.default_local_dir, as verl's file logger writes them.

metrics.jsonl: one {"step": N, "data": {key: value}} per step; samples.jsonl: one object per sample.
"""
from __future__ import annotations

import json
import math
import os

from engine.loggers.base import Logger


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else (1e308 if value > 0 else -1e308)
    return value


class FileLogger(Logger):
    def __init__(self, directory: str):
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.metrics = open(os.path.join(directory, "metrics.jsonl"), "a", encoding="utf-8")
        self.samples = open(os.path.join(directory, "samples.jsonl"), "a", encoding="utf-8")

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        data = {k: _clean(v) for k, v in metrics.items()}
        self.metrics.write(json.dumps({"step": step, "data": data}) + "\n")
        self.metrics.flush()

    def log_samples(self, step: int, samples: list[dict]) -> None:
        for s in samples:
            self.samples.write(json.dumps(s, default=str) + "\n")
        self.samples.flush()

    def log_status(self, status: str, **fields) -> None:
        if status == "resumed":  # drop what a killed run logged after the checkpoint it resumes from
            self._truncate_after(int(fields.get("step", 0)))

    def _truncate_after(self, step: int) -> None:
        for attr, name in (("metrics", "metrics.jsonl"), ("samples", "samples.jsonl")):
            getattr(self, attr).close()
            path = os.path.join(self.directory, name)
            with open(path, encoding="utf-8") as f:
                kept = [line for line in f if line.strip() and json.loads(line).get("step", 0) <= step]
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(kept)
            os.replace(tmp, path)
            setattr(self, attr, open(path, "a", encoding="utf-8"))

    def close(self) -> None:
        for f in (self.metrics, self.samples):
            if not f.closed:
                f.close()


def read_written(path) -> list[dict]:
    """The records of a JSON-lines file this logger writes (metrics.jsonl, samples.jsonl) as far as written: a last
    line still being written is left out, so a reader can follow a live run."""
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines = lines[:-1]
    return [json.loads(line) for line in lines if line.strip()]
