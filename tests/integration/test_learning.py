"""Learning: the shipped demo configuration raises held-out arithmetic accuracy by at least 20 points.

It runs the demo exactly as a user would (`python -m engine.main_ppo --config-name demo`), with data
and the tiny model prepared on first use in a fresh cache, and reads `val-core/arith/reward/mean@1`
before training (step 0) and after the last step from metrics.jsonl. How long it takes is printed,
not asserted (speed lives in benchmarks); the subprocess timeout only guards against a hang.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.integration.helpers import engine_env

pytestmark = [pytest.mark.slow, pytest.mark.ray]
VAL_KEY = "val-core/arith/reward/mean@1"


def test_demo_raises_heldout_accuracy_by_20_points(tmp_path):
    out = tmp_path / "demo"
    env = engine_env() | {"RLSTUDIO_CACHE": str(tmp_path / "cache")}
    start = time.time()
    result = subprocess.run([sys.executable, "-m", "engine.main_ppo", "--config-name", "demo",
                             f"trainer.default_local_dir={out}"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=1500)
    elapsed = time.time() - start
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    val = [(r["step"], r["data"][VAL_KEY]) for r in records if VAL_KEY in r["data"]]
    before, after = val[0], val[-1]
    print(f"\ndemo: {VAL_KEY} {before[1]:.3f} at step {before[0]} -> {after[1]:.3f} at step {after[0]} "
          f"in {elapsed:.0f}s (whole run incl. start-up)")
    assert before[0] == 0 and after[0] > 0
    assert after[1] - before[1] >= 0.20, f"accuracy went {before[1]:.3f} -> {after[1]:.3f}: {val}"
