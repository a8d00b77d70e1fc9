"""Batch splitting/joining (the one place batches are split over workers), the reduction of the workers' metrics and the
console line."""
from __future__ import annotations

import pytest
import torch

from engine.loggers.console import format_step_line
from engine.protocol import Batch


def make(n=5):
    return Batch({"x": torch.arange(n * 2).view(n, 2)}, {"name": [f"r{i}" for i in range(n)]}, {"step": 1})


def test_chunk_is_even_and_concat_restores():
    b = make(5)
    parts = b.chunk(2)
    assert [len(p) for p in parts] == [2, 3]
    joined = Batch.concat(parts)
    assert torch.equal(joined["x"], b["x"]) and list(joined["name"]) == list(b["name"])
    assert joined.info == {"step": 1}


def test_repeat_interleave_keeps_groups_adjacent():
    b = make(2).repeat_interleave(3)
    assert list(b["name"]) == ["r0", "r0", "r0", "r1", "r1", "r1"]
    assert b["x"][:, 0].tolist() == [0, 0, 0, 2, 2, 2]


def test_concat_pads_different_widths():
    a = Batch({"y": torch.ones(1, 2)})
    c = Batch({"y": torch.ones(1, 4)})
    joined = Batch.concat([a, c])
    assert joined["y"].shape == (2, 4) and joined["y"][0].tolist() == [1, 1, 0, 0]


def test_union_and_index():
    b = make(3).union(Batch({"z": torch.tensor([7, 8, 9])}))
    picked = b.index([2, 0])
    assert picked["z"].tolist() == [9, 7] and list(picked["name"]) == ["r2", "r0"]


def test_console_line_has_the_seed_fields():
    line = format_step_line(10, {"training/epoch": 0, "critic/score/mean": 0.5, "actor/pg_loss": -0.01,
                                 "critic/vf_loss": 0.2, "actor/reward_kl_penalty": 0.003,
                                 "response_length/mean": 42.0, "timing_s/step": 1.25,
                                 "val-core/openai/gsm8k/reward/mean@1": 0.31})
    assert line.startswith("Epoch 1 | Step 10 | Score: 0.5000 | Actor Loss: -0.0100 | Critic Loss: 0.2000 | KL: 0.0030")
    assert "Resp Len: 42.0" in line and "Step Time: 1.250s" in line and "openai/gsm8k val@1: 0.3100" in line
    assert "SKIPPED" not in line


def test_step_line_says_when_an_update_was_skipped():
    ok = format_step_line(3, {"actor/grad_norm_nonfinite": 0.0, "critic/grad_norm_nonfinite": 0.0})
    assert "SKIPPED" not in ok
    line = format_step_line(3, {"actor/grad_norm_nonfinite": 1.0, "critic/grad_norm_nonfinite": 1.0,
                                "actor/grad_norm": float("nan")})
    assert line.endswith("UPDATE SKIPPED (actor, critic: non-finite grad norm)")
    assert format_step_line(3, {"critic/grad_norm_nonfinite": 1.0}).endswith("(critic: non-finite grad norm)")


def test_console_kl_is_the_kl_to_the_reference_never_ppo_kl():
    on_policy = {"actor/pg_loss": -0.01, "actor/ppo_kl": 0.0}
    # no reference (GRPO without KL): ppo_kl (0 by construction on-policy) must not pass for the KL
    assert "KL: none (no reference)" in format_step_line(1, on_policy)
    assert "KL: 0.0" not in format_step_line(1, on_policy)
    # KL in the actor's loss, else the KL penalty in the reward
    both = {**on_policy, "actor/kl_loss": 0.042, "actor/reward_kl_penalty": 0.5}
    assert "KL: 0.0420" in format_step_line(1, both)
    assert "KL: 0.1600" in format_step_line(1, {**on_policy, "actor/reward_kl_penalty": 0.16})
    # a validation-only line (step 0, before training) says nothing about KL
    assert "KL" not in format_step_line(0, {"val-core/arith/reward/mean@1": 0.3})


def test_the_rollouts_weight_check_is_the_steps_worst_check():
    """DAPO's refills generate again in the same step; their weight checks see no move since the step's first, so
    the step reports the first check's move, not a mean diluted by the refills (engine/trainer/metrics.py)."""
    from engine.trainer.metrics import reduce_worker_metrics

    calls = {"rollout/actor_weight_change": [0.018, 0.0, 0.0], "rollout/weights_stale": [0.0, 0.0, 0.0],
             "timing_s/gen_worker": [0.3, 0.1, 0.2]}
    out = reduce_worker_metrics(calls)
    assert out["rollout/actor_weight_change"] == 0.018 and out["rollout/weights_stale"] == 0.0
    assert out["timing_s/gen_worker"] == pytest.approx(0.2)  # the others stay means
