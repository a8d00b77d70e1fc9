"""The recipe presets run: 2 steps on the tiny model and arith data, one CPU worker, from the presets users pick
(engine/configs/gsm8k_{dapo,drgrpo,gspo}.yaml) with only sizes and paths overridden; each logs its recipe's metrics.

The numbers themselves are checked by hand-computed fixtures (tests/unit/test_dapo.py, test_rollout_correction.py,
test_algos_losses.py) and against verl (tests/unit/test_verl_reference.py); here the pieces work in the loop.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.integration.helpers import run_engine

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # a local Ray per run: ~2 min each on a loaded machine


def recipe_run(preset: str, tiny_model: str, data: Path, out: Path, **extra) -> list[dict]:
    args = {
        "data.train_files": str(data / "train.parquet"), "data.val_files": str(data / "test.parquet"),
        "data.train_batch_size": 4, "data.max_prompt_length": 32, "data.max_response_length": 6,
        "actor_rollout_ref.model.path": tiny_model, "actor_rollout_ref.model.enable_gradient_checkpointing": "False",
        "actor_rollout_ref.actor.optim.lr": "1e-4", "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 8, "actor_rollout_ref.rollout.n": 4,
        "trainer.n_gpus_per_node": 1, "trainer.total_training_steps": 2, "trainer.val_before_train": "False",
        "trainer.test_freq": -1, "trainer.save_freq": -1, "trainer.export_hf_model": "False",
        "trainer.logger": "['console','file']", "trainer.default_local_dir": str(out),
    }
    args.update({k: str(v) for k, v in extra.items()})
    result = run_engine(["--config-name", preset, *[f"{k}={v}" for k, v in args.items()]], cwd=out.parent)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r["data"] for r in records if "actor/pg_loss" in r["data"]]
    assert len(steps) == 2, records
    for step in steps:
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float)), step
    return steps


def test_dapo_with_rollout_correction(tiny_model, arith_data, tmp_path):
    """DAPO preset + rollout correction (the static-cache HF rollout returns its log-probs on CPU too)."""
    steps = recipe_run("gsm8k_dapo", tiny_model, arith_data, tmp_path / "dapo", **{
        "+reward_model.reward_kwargs.overlong_buffer_cfg.len": 2,
        "+actor_rollout_ref.rollout.engine_kwargs.hf.decode": "static",
        "algorithm.rollout_correction.rollout_is": "token", "algorithm.rollout_correction.rollout_is_threshold": 2.0,
        "algorithm.rollout_correction.rollout_rs": "token_k1",
        "algorithm.rollout_correction.rollout_rs_threshold": "0.5_2.0"})
    for m in steps:
        # dynamic sampling: at least one generation batch, some groups kept, the batch full (4 prompts x 4)
        assert m["train/num_gen_batches"] >= 1 and 0 < m["train/kept_group_fraction"] <= 1
        assert m["critic/score/max"] > m["critic/score/min"]  # a kept batch has groups with different scores
        # overlong shaping: the score before it (acc) and the penalty (<= 0), logged per the preset's log=true
        assert "reward_extra/acc/mean" in m and m["reward_extra/overlong_reward/mean"] <= 0
        assert 0 <= m["reward_extra/overlong/mean"] <= 1
        # rollout correction: fp32 on CPU, so the weights are ~1 and nothing is rejected — but all are computed
        assert m["rollout_corr/rollout_is_mean"] == pytest.approx(1.0, abs=1e-3)
        assert m["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(1.0, abs=1e-3)
        assert m["rollout_corr/rollout_rs_masked_fraction"] == 0.0
        assert abs(m["rollout_corr/kl"]) < 1e-4
        # one mismatch measure from the same tensors: both present, both tiny, neither a stand-in zero
        assert 0 <= m["training/rollout_probs_diff_mean"] < 1e-4
        assert 0 <= m["actor/rollout_log_probs_absdiff"] < 1e-4


def test_drgrpo_preset_with_gspo_loss(tiny_model, arith_data, tmp_path):
    """Dr.GRPO preset (no std division, seq-mean-token-sum-norm), its loss swapped for GSPO's sequence ratio."""
    steps = recipe_run("gsm8k_drgrpo", tiny_model, arith_data, tmp_path / "drgrpo", **{
        "actor_rollout_ref.actor.policy_loss.loss_mode": "gspo", "actor_rollout_ref.actor.clip_ratio": 0.2})
    for m in steps:
        assert m["actor/pg_clipfrac_lower"] == 0.0  # GSPO has no dual clip
        assert "rollout_corr/kl" not in m and "training/rollout_probs_diff_mean" not in m  # HF generate: none
    assert steps[1]["actor/grad_norm"] > 0
