"""The train/inference mismatch: how far the rollout engine's token probabilities are from the actor's own, and
verl's rollout correction (algorithm.rollout_correction.*) that compensates for it.

vLLM (or the static-cache HF rollout in bf16) samples with its own kernels, so the probability it gave a sampled
token differs a little from what the actor recomputes for the same token. All mismatch metrics come from one
place, the step's batch once it holds both log-probs, so they always describe the same tensors:
`training/rollout_probs_diff_{mean,max,std}` (|p_rollout - p_actor|, verl's names), `actor/rollout_log_probs_absdiff`
(|log p_rollout - log p_actor|) and verl's `rollout_corr/*` (KL, perplexities, chi^2; with correction on also the
weights' mean/max/std, effective sample size, clipped and rejected fractions). A rollout without log-probs (HF
generate) reports none of them rather than a zero.
"""
from __future__ import annotations

import torch

from engine import metric_names
from engine.algos.rollout_correction import mismatch_metrics, rollout_correction
from engine.protocol import Batch


def rollout_probs_diff(rollout_log_probs: torch.Tensor, actor_log_probs: torch.Tensor,
                       response_mask: torch.Tensor) -> dict[str, float]:
    """|exp(rollout) - exp(actor)| (mean, max, std) and mean |rollout - actor| over the response tokens."""
    valid = response_mask.bool()
    if not valid.any():
        return {}
    rollout, actor = rollout_log_probs.float()[valid], actor_log_probs.float()[valid]
    diff = (rollout.exp() - actor.exp()).abs()
    return {metric_names.ROLLOUT_PROBS_DIFF_MEAN: diff.mean().item(),
            "training/rollout_probs_diff_max": diff.max().item(),
            "training/rollout_probs_diff_std": diff.std().item() if diff.numel() > 1 else 0.0,
            metric_names.ROLLOUT_LOG_PROBS_ABSDIFF: (rollout - actor).abs().mean().item()}


def rollout_mismatch_metrics(batch: Batch) -> dict[str, float]:
    """The metrics for a step's batch once it holds both the rollout's and the actor's log-probs (after the
    old-log-prob pass, or after an on-policy actor update which reports them); {} otherwise (HF generate)."""
    if "rollout_log_probs" not in batch.tensors or "old_log_probs" not in batch.tensors:
        return {}
    rollout, actor, mask = batch["rollout_log_probs"], batch["old_log_probs"], batch["response_mask"]
    metrics = rollout_probs_diff(rollout, actor, mask)
    if metrics:
        m = mismatch_metrics(actor.double(), rollout.double(), mask.double())
        metrics.update({f"rollout_corr/{k}": v for k, v in m.items()})
    return metrics


def correction_enabled(rc) -> bool:
    return rc.rollout_is is not None or rc.rollout_rs is not None


def apply_rollout_correction(batch: Batch, rc) -> dict[str, float]:
    """Importance weights (`rollout_is_weights`, multiplied into the policy loss) and rejection (tokens leave
    `response_mask`) from the old and rollout log-probs, in place; returns the `rollout_corr/*` metrics."""
    if "rollout_log_probs" not in batch.tensors:
        raise ValueError("algorithm.rollout_correction is on but the rollout returned no log-probs: use "
                         "actor_rollout_ref.rollout.name=vllm or +actor_rollout_ref.rollout.engine_kwargs.hf.decode=static")
    weights, mask, metrics = rollout_correction(
        batch["old_log_probs"].double(), batch["rollout_log_probs"].double(), batch["response_mask"],
        rollout_is=rc.rollout_is, rollout_is_threshold=rc.rollout_is_threshold,
        rollout_is_batch_normalize=rc.rollout_is_batch_normalize, rollout_rs=rc.rollout_rs,
        rollout_rs_threshold=rc.rollout_rs_threshold)
    batch.tensors["response_mask"] = mask
    if weights is not None:
        batch.tensors["rollout_is_weights"] = weights.to(batch["old_log_probs"].dtype)
    return metrics


def bypass_old_log_probs(batch: Batch) -> torch.Tensor:
    """algorithm.rollout_correction.bypass_mode: the rollout's (behaviour) log-probs stand in for the old ones, so
    the PPO ratio is pi_theta / pi_rollout and the old-log-prob pass is skipped (verl's two-policy mode)."""
    if "rollout_log_probs" not in batch.tensors:
        raise ValueError("algorithm.rollout_correction.bypass_mode=True but the rollout returned no log-probs: use "
                         "actor_rollout_ref.rollout.name=vllm or +actor_rollout_ref.rollout.engine_kwargs.hf.decode=static")
    return batch["rollout_log_probs"].clone()


# ---- exact mode (actor_rollout_ref.rollout.exact, docs/exact-mode.md) ----------------------------------------------
EXACT_KEY = "actor_rollout_ref.rollout.exact"


class NotExactError(RuntimeError):
    """Exact mode: a step's rollout and actor log-probs were not bit-equal; the run stops here."""


def exact_metrics(worker: dict[str, list[float]]) -> dict[str, float]:
    """The mismatch metrics of an exact-mode step, from the actor update's check of its first forward against the
    rollout's log-probs (engine/workers/actor.exact_check: sums over micro-batches and workers), under verl's names;
    `exact/mismatched_tokens` counts the tokens whose log-probs are not bit-equal. {} when nothing was checked."""
    tokens = sum(worker.get("_exact_tokens", []))
    if not tokens:
        return {}
    return {"training/rollout_probs_diff_mean": sum(worker["_exact_dp_sum"]) / tokens,
            "training/rollout_probs_diff_max": max(worker["_exact_dp_max"]),
            "actor/rollout_log_probs_absdiff": sum(worker["_exact_dlogp_sum"]) / tokens,
            "rollout_corr/k3_kl": sum(worker["_exact_k3_sum"]) / tokens,
            "exact/mismatched_tokens": float(sum(worker["_exact_mismatched"])),
            "exact/checked_tokens": float(tokens)}


def check_exact(metrics: dict[str, float], step: int) -> None:
    """Fail the run loudly when a step was not exact (or when nothing could be checked)."""
    if "exact/checked_tokens" not in metrics:
        raise NotExactError(f"{EXACT_KEY}=True: step {step} checked no token against the rollout's log-probs (the "
                            "actor update did not run its check)")
    bad = int(metrics["exact/mismatched_tokens"])
    if bad:
        raise NotExactError(
            f"{EXACT_KEY}=True: step {step} is not exact: {bad} of {int(metrics['exact/checked_tokens'])} response "
            f"tokens have log-probs that differ between the rollout and the actor (max |p_rollout - p_actor| = "
            f"{metrics['training/rollout_probs_diff_max']:.3g}). Something computes outside the batch-invariant path "
            f"(docs/exact-mode.md); set {EXACT_KEY}=False to train with the mismatch.")
