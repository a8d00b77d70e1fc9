"""A custom reward function (`custom_reward_function.path=<this file>`) that holds a run at a known point.

It scores like the built-in reward. With HOLD_AFTER_STEP=N and HOLD_MARKER=<file> in the environment, the
first call made after the run's metrics.jsonl (HOLD_METRICS) shows training step N - that is, while scoring
step N+1's rollouts, before that step can log or checkpoint anything - writes the marker and blocks until
the process is killed. A test waits for the marker (a state) and can then kill the run at exactly that
point on any machine, fast or slow. Without HOLD_MARKER, or once the marker exists, it never blocks, so a
resumed run with the same config trains on.
"""
from __future__ import annotations

import json
import os
import threading

from engine.reward.default import default_compute_score


def _logged_step(metrics_file: str, step: int) -> bool:
    if not os.path.exists(metrics_file):
        return False
    with open(metrics_file, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("step") == step and "training/global_step" in record.get("data", {}):
                return True
    return False


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    marker = os.environ.get("HOLD_MARKER")
    if marker and not os.path.exists(marker) and _logged_step(os.environ["HOLD_METRICS"],
                                                              int(os.environ["HOLD_AFTER_STEP"])):
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        threading.Event().wait()  # held here until the test kills the run
    return default_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
