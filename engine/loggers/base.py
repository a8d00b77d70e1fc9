"""The logger interface every tracking backend implements (console, file, wandb, dashboard, ...).

The trainer calls, once per step: `log_metrics(step, metrics)` with flat verl-style keys
(`critic/score/mean`, `actor/pg_loss`, ...) and `log_samples(step, samples)` with one dict per rollout
(see `engine.trainer.samples` for the fields). `log_status` reports run-level events (started, finished,
failed with an error message). `log_phase(phase, step)` is the driver's heartbeat: the phase of the loop it
enters (engine/trainer/heartbeat.py), once per change; a logger whose `log_phase` also takes `detail` gets the
phase's one-line detail when there is one (the async trainer's `wait_rollout`: what the rollout thread is doing).
`close()` flushes; it must be safe to call twice.
"""
from __future__ import annotations

import inspect
from typing import Any


class Logger:
    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:  # pragma: no cover - interface
        pass

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        pass

    def log_status(self, status: str, **fields: Any) -> None:
        pass

    def log_phase(self, phase: str, step: int) -> None:
        pass

    def close(self) -> None:
        pass


def report_phase(logger, phase: str, step: int, detail: str | None = None) -> None:
    """`logger.log_phase(phase, step)`, with `detail=` when there is one and the logger takes it (a logger written
    before log_phase existed has none: nothing is reported)."""
    report = getattr(logger, "log_phase", None)
    if report is None:
        return
    if detail is not None and "detail" in inspect.signature(report).parameters:
        report(phase, step, detail=detail)
    else:
        report(phase, step)
