"""The same run on 1 and on 2 workers (FSDP2 over gloo here; the same code runs over NCCL on GPUs): equal
losses and gradient norms step by step, and a checkpoint saved by 2 workers resumes on 1 and on 2.

The rollout is greedy and the advantage estimator GAE (n=1), so both runs see the same responses, and one
mini-batch per step, so both update on the same rows; what remains is the loss arithmetic, which must not
depend on how the batch is split over workers and micro-batches (engine/workers/loss_weights.py).
"""
from __future__ import annotations

import json
import shutil

import pytest

from tests.integration.helpers import base_args, run_engine

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # four engine runs
KEYS = ("actor/grad_norm", "actor/pg_loss", "critic/vf_loss", "critic/grad_norm", "critic/score/mean")


def run(tiny_model, arith_data, out, workers, steps, cwd):
    args = base_args(tiny_model, arith_data, out, **{
        "algorithm.adv_estimator": "gae", "actor_rollout_ref.rollout.n": 1,
        "actor_rollout_ref.rollout.do_sample": "False",
        "actor_rollout_ref.actor.ppo_mini_batch_size": 16, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
        "critic.ppo_micro_batch_size_per_gpu": 4, "trainer.n_gpus_per_node": workers,
        "trainer.total_training_steps": steps, "trainer.save_freq": 2, "trainer.val_before_train": "False",
        "trainer.test_freq": -1, "trainer.logger": "['console','file']"})
    result = run_engine(args, cwd)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def step_metrics(out) -> dict[int, dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: {k: r["data"][k] for k in KEYS} for r in records if "actor/grad_norm" in r["data"]}


def assert_close(a: dict, b: dict, what: str):
    for key in KEYS:
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), f"{what}: {key} {a[key]} vs {b[key]}"


def test_one_and_two_workers_agree_and_checkpoints_reshard(tiny_model, arith_data, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    run(tiny_model, arith_data, one, workers=1, steps=2, cwd=tmp_path)
    run(tiny_model, arith_data, two, workers=2, steps=3, cwd=tmp_path)
    m1, m2 = step_metrics(one), step_metrics(two)
    assert sorted(m1) == [1, 2] and sorted(m2) == [1, 2, 3]
    assert m1[1]["actor/grad_norm"] > 0 and m1[1]["critic/vf_loss"] > 0
    for step in (1, 2):
        assert_close(m1[step], m2[step], f"step {step}, 1 vs 2 workers")

    # the checkpoint that 2 workers saved at step 2 resumes on 1 worker and on 2: step 3 as if uninterrupted
    for workers in (1, 2):
        resumed = tmp_path / f"resumed_on_{workers}"
        resumed.mkdir()
        shutil.copytree(two / "global_step_2", resumed / "global_step_2")
        (resumed / "latest_checkpointed_iteration.txt").write_text("2")
        result = run(tiny_model, arith_data, resumed, workers=workers, steps=3, cwd=tmp_path)
        assert "resumed" in result.stdout
        m = step_metrics(resumed)
        assert sorted(m) == [3], f"resumed on {workers}: steps {sorted(m)}"
        assert_close(m[3], m2[3], f"step 3 resumed on {workers} worker(s)")
