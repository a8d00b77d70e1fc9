"""The train/inference mismatch: how far the rollout engine's token probabilities are from the actor's own.

vLLM samples with its own kernels (and often in bf16), so the probability it gave a sampled token differs
a little from what the actor recomputes for the same token. verl logs this as
`training/rollout_probs_diff_{mean,max,std}` (|p_rollout − p_actor| over response tokens); a mean that
grows past ~0.01–0.05 usually means a dtype or weight-sync problem rather than noise.
"""
from __future__ import annotations

import torch

from engine.protocol import Batch


def rollout_probs_diff(rollout_log_probs: torch.Tensor, actor_log_probs: torch.Tensor,
                       response_mask: torch.Tensor) -> dict[str, float]:
    """Mean, max and std of |exp(rollout) − exp(actor)| over the response tokens (mask = 1)."""
    valid = response_mask.bool()
    if not valid.any():
        return {}
    diff = (rollout_log_probs.float().exp() - actor_log_probs.float().exp()).abs()[valid]
    return {"training/rollout_probs_diff_mean": diff.mean().item(),
            "training/rollout_probs_diff_max": diff.max().item(),
            "training/rollout_probs_diff_std": diff.std().item() if diff.numel() > 1 else 0.0}


def rollout_mismatch_metrics(batch: Batch) -> dict[str, float]:
    """The metric for a step's batch, once it holds both the rollout's and the actor's log-probs (after the
    old-log-prob pass, or after an on-policy actor update which reports them); {} otherwise (HF rollout)."""
    if "rollout_log_probs" not in batch.tensors or "old_log_probs" not in batch.tensors:
        return {}
    return rollout_probs_diff(batch["rollout_log_probs"], batch["old_log_probs"], batch["response_mask"])
