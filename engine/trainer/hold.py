"""A test hook that makes a run stop at a known step instead of racing it: with `RLSTUDIO_HOLD_DIR=DIR` in
the environment, the trainer, after logging step N (and saving its checkpoint, if any), waits while the
file `DIR/step-N` exists. It writes `DIR/held-N` (its pid) first, so a test knows the run is there. The
file logger has written step N by then; the dashboard logger may still be sending it."""
from __future__ import annotations

import os
import time

ENV = "RLSTUDIO_HOLD_DIR"


def hold_after(step: int, before=None) -> None:
    """`before`: called when the run is about to hold (e.g. to complete a checkpoint written in the background,
    so that what the doc above promises holds while the test looks)."""
    directory = os.environ.get(ENV)
    if not directory:
        return
    gate = os.path.join(directory, f"step-{step}")
    if not os.path.exists(gate):
        return
    if before is not None:
        before()
    held = os.path.join(directory, f"held-{step}")
    with open(held + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(held + ".tmp", held)
    while os.path.exists(gate):
        time.sleep(0.1)
