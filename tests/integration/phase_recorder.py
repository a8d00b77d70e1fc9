"""An after-step hook (engine/trainer/hooks.py) that records the driver's heartbeat: with
RLSTUDIO_AFTER_STEP=tests.integration.phase_recorder:record and RLSTUDIO_PHASES_FILE=PATH, every phase the trainer
reports from step 2 on is appended to PATH as "STEP PHASE" (the hook first runs after step 1)."""
from __future__ import annotations

import os

from tests.checkout_path import checkout_pythonpath

HOOK = "tests.integration.phase_recorder:record"
FILE_ENV = "RLSTUDIO_PHASES_FILE"


def hook_env(path) -> dict[str, str]:
    """A run's environment entries for this hook (the run's working directory is not the repository's)."""
    from engine.trainer import AFTER_STEP_ENV

    return {AFTER_STEP_ENV: HOOK, FILE_ENV: str(path), "PYTHONPATH": checkout_pythonpath()}


def record(step: int, trainer=None) -> None:
    if trainer is None or getattr(trainer, "_phases_recorded", False):
        return
    path, report = os.environ[FILE_ENV], trainer.heartbeat.enter

    def recording(phase: str, at_step: int, detail: str | None = None) -> None:  # detail: the async wait_rollout's
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{at_step} {phase}\n")
        report(phase, at_step, detail=detail)

    trainer.heartbeat.enter = recording
    trainer._phases_recorded = True


def phases(path, step: int) -> list[str]:
    """The phases recorded for `step`, in order."""
    with open(path, encoding="utf-8") as f:
        lines = [line.split(" ", 1) for line in f.read().splitlines() if line.strip()]
    return [phase for at, phase in lines if int(at) == step]
