"""`python -m engine.bench.async_demo` in its short mode (--steps 2) on the untrained tiny model and small arith
data: each mode's run prints one JSON line with its validations at steps 0 and 2 and verl's staleness (sync 0;
one batch ahead: step 1 on the initial weights, step 2 one version behind), then the side-by-side table; the PPO
preset's separate_async run gets verl's parameter_sync_step from the run's batch shape."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO, engine_env

pytestmark = [pytest.mark.slow]  # whole engine runs (one in-process worker each, no Ray)


def run_demo_bench(tmp_path, tiny_model, arith_data, *args) -> tuple[list[dict], str]:
    small = [f"actor_rollout_ref.model.path={tiny_model}", f"data.train_files={arith_data / 'train.parquet'}",
             f"data.val_files={arith_data / 'test.parquet'}"]
    proc = subprocess.run([sys.executable, "-m", "engine.bench.async_demo", "--steps", "2", "--workdir",
                           str(tmp_path / "runs"), *args, *small], check=False, cwd=REPO, env=engine_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")], proc.stdout


def test_grpo_sync_and_one_batch_ahead_side_by_side(tmp_path, tiny_model, arith_data):
    rows, stdout = run_demo_bench(tmp_path, tiny_model, arith_data, "--algos", "grpo", "--modes", "sync,colocate_async")
    assert [(r["algo"], r["preset"], r["mode"], r["threshold"]) for r in rows] == [
        ("grpo", "demo", "sync", 1), ("grpo", "demo", "colocate_async", 2)]
    for r in rows:
        assert r["steps"] == 2 and [s for s, _ in r["validations"]] == [0, 2], r
        assert r["wall_s"] > r["startup_s"] > 0 and r["step_s_median"] > 0, r
        assert r["target_step"] is None and r["time_to_target_s"] is None  # 2 steps of an untrained model
    sync, ahead = rows
    assert (sync["staleness_mean"], sync["staleness_max"]) == (0, 0)
    assert (ahead["staleness_mean"], ahead["staleness_max"]) == (0.5, 1)  # steps 1, 2: staleness 0, 1
    assert "grpo | sync | 2 |" in stdout and "grpo | colocate_async | 2 |" in stdout  # the table


def test_ppo_separate_async_takes_the_sync_step_from_the_batch_shape(tmp_path, tiny_model, arith_data):
    # 32 prompts in mini-batches of 8: parameter_sync_step 4 (verl refuses any other value by name)
    rows, _ = run_demo_bench(tmp_path, tiny_model, arith_data, "--algos", "ppo", "--modes", "separate_async",
                             f"critic.model.path={tiny_model}", "data.train_batch_size=32",
                             "actor_rollout_ref.actor.ppo_mini_batch_size=8")
    [row] = rows
    assert (row["preset"], row["mode"], row["steps"], row["staleness_max"]) == ("demo_ppo", "separate_async", 2, 1)


def test_unknown_mode_is_refused_by_name():
    proc = subprocess.run([sys.executable, "-m", "engine.bench.async_demo", "--modes", "sync,fast"], check=False,
                          cwd=REPO,
                          env=engine_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--modes: unknown ['fast']" in proc.stderr, proc.stderr[-2000:]
