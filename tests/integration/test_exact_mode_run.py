"""Exact mode end to end (issue 39): `python -m engine.main_ppo actor_rollout_ref.rollout.exact=True`, 2 GRPO steps of
the tiny model on one in-process CPU worker. Every step reports verl's mismatch metrics as exactly 0 (computed by the
update's check of its first forward against the rollout's log-probs, over every response token), and the
old-log-prob phase never runs."""
from __future__ import annotations

import json

import pytest

from tests.integration.helpers import base_args, run_engine


@pytest.mark.slow  # trains end to end
def test_exact_run_reports_zero_mismatch_and_skips_the_old_log_prob_pass(tiny_model, arith_data, tmp_path):
    out = tmp_path / "run"
    args = base_args(tiny_model, arith_data, out, **{
        "algorithm.adv_estimator": "grpo", "trainer.n_gpus_per_node": 1, "ray_init.mode": "in_process",
        "actor_rollout_ref.actor.ppo_mini_batch_size": 16,  # one mini-batch: every row is checked
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4, "trainer.total_training_steps": 2,
        "trainer.val_before_train": "False", "actor_rollout_ref.rollout.exact": "True"})
    result = run_engine(args, tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r["data"] for r in records if "training/global_step" in r["data"]}
    assert sorted(steps) == [1, 2]
    for m in steps.values():
        assert m["training/rollout_probs_diff_max"] == 0.0
        assert m["training/rollout_probs_diff_mean"] == 0.0
        assert m["rollout_corr/k3_kl"] == 0.0
        assert m["exact/mismatched_tokens"] == 0.0
        # every response token of the batch was checked (16 prompts x 4 answers)
        assert m["exact/checked_tokens"] == round(m["response_length/mean"] * 64)
        assert "timing_s/old_log_prob" not in m and "timing_s/update_actor" in m
        assert m["actor/entropy"] > 0  # reported from the checked forward
