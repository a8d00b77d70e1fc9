"""The tests' step gate, on the trainer's after-step hook (engine/trainer/hooks.py): a run stops at a known step
instead of being raced. With `hold_env(DIR)` in a server's environment (its jobs get RLSTUDIO_AFTER_STEP and
RLSTUDIO_HOLD_DIR through RLSTUDIO_JOB_ENV), the trainer, after logging step N (and completing its checkpoint,
if any), waits while the file `DIR/step-N` exists. It writes `DIR/held-N` (its pid) first, so a test knows the
run is there. The file logger has written step N by then; the dashboard logger may still be sending it.
The job imports this module from its working directory (the repository: RLSTUDIO_JOB_WORKDIR, or the server's)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

DIR_ENV = "RLSTUDIO_HOLD_DIR"
HOOK = "tests.step_hold:hold_after"


def hold_env(directory: str | Path) -> dict[str, str]:
    """A server's environment entry that gives its jobs this gate on `directory`."""
    from engine.trainer import AFTER_STEP_ENV

    return {"RLSTUDIO_JOB_ENV": json.dumps({AFTER_STEP_ENV: HOOK, DIR_ENV: str(directory)})}


def hold_after(step: int, trainer=None) -> None:
    """The hook: hold after `step` while DIR/step-<step> exists (`trainer`: its background checkpoint write is
    completed first, so that what the doc above promises holds while the test looks)."""
    directory = os.environ.get(DIR_ENV)
    if not directory:
        return
    gate = os.path.join(directory, f"step-{step}")
    if not os.path.exists(gate):
        return
    if trainer is not None:
        trainer.wait_for_checkpoint()
    held = os.path.join(directory, f"held-{step}")
    with open(held + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(held + ".tmp", held)
    while os.path.exists(gate):
        time.sleep(0.1)
