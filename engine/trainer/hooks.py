"""The trainer's after-step hook: with `RLSTUDIO_AFTER_STEP=package.module:function` in the job's environment,
the trainer imports `function` once, when it starts, and calls `function(step, trainer)` after each step, once
the step is logged (the file logger has written it; the dashboard logger may still be sending it) and its
checkpoint, if any, is being written (`trainer.wait_for_checkpoint()` completes a write that goes on in the
background). The step waits for the call to return. Unset, nothing is imported and a step costs one `is None`.

A server passes the variable on to its jobs through its `job_env` setting (RLSTUDIO_JOB_ENV). The tests use it to
stop a run at a known step instead of racing it (tests/step_hold.py)."""
from __future__ import annotations

import importlib
import os
from collections.abc import Callable

ENV = "RLSTUDIO_AFTER_STEP"


def after_step_hook(spec: str | None = None) -> Callable[[int, object], None] | None:
    """The hook `spec` names (default: $RLSTUDIO_AFTER_STEP), or None when none is set."""
    spec = os.environ.get(ENV) if spec is None else spec
    if not spec:
        return None
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"{ENV}={spec!r}: expected package.module:function")
    hook = getattr(importlib.import_module(module), name, None)
    if not callable(hook):
        raise ValueError(f"{ENV}={spec!r}: {module} has no function {name!r}")  # noqa: TRY004 - a bad setting
    return hook
