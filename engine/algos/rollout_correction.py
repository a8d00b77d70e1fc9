"""Rollout correction (verl's `algorithm.rollout_correction.*`): the rollout engine samples from a slightly different
distribution than the actor computes (other kernels, bf16), so the update is off-policy by the ratio
rho = pi_actor / pi_rollout. Two remedies, both from log_ratio = old_log_prob - rollout_log_prob:

- importance weights (`rollout_is`: "token" = rho_t, "sequence" = prod_t rho_t) that multiply the policy loss,
  truncated at an upper bound (TIS: `rollout_is_threshold=2.0`) or, given "lower_upper" (IcePop: "0.5_2.0"), set
  to zero outside the band;
- rejection (`rollout_rs`, MIS): tokens or whole sequences whose divergence is past `rollout_rs_threshold` leave
  the response mask. Options "<level>_k<n>": level token, seq_sum, seq_mean or seq_max; divergence k1 = -log_ratio
  = log(pi_rollout / pi_actor) (bounds "lower_upper" on pi_rollout / pi_actor, or one upper u meaning [1/u, u]),
  k2 = log_ratio^2 / 2, k3 =
  rho - 1 - log_ratio (one upper bound). Several comma-separated options must all pass.

Metrics are verl's, under `rollout_corr/`. Pure tensor functions; [B, R] tensors, `response_mask` marks tokens.
"""
from __future__ import annotations

import math

import torch

from engine.algos.utils import masked_mean, masked_sum
from engine.config.rollout_correction import RS_OPTIONS, parse_is_threshold, parse_rs  # noqa: F401 - re-exported

SAFETY_BOUND = 20.0  # exp(±20) stays finite in fp32
def importance_weights(log_ratio: torch.Tensor, response_mask: torch.Tensor, level: str, threshold: str | float,
                       batch_normalize: bool = False) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated (TIS) or band-masked (IcePop) importance weights, zero on padding, detached."""
    if level not in ("token", "sequence"):
        raise ValueError(f"rollout_is must be 'token' or 'sequence', got {level!r}")
    upper, lower = parse_is_threshold(threshold)
    mask = response_mask.to(log_ratio.dtype)
    if level == "token":
        metric_log_ratio = log_ratio
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    else:
        metric_log_ratio = masked_sum(log_ratio, mask, dim=-1)[:, None]
        raw = torch.exp(metric_log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    raw = raw * mask
    if lower is None:
        weights = raw.clamp(max=upper)
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    weights = weights.detach()
    low = lower if lower is not None else 1.0 / upper
    m: dict[str, float] = {"rollout_is_mean": masked_mean(weights, mask).item()}
    if level == "sequence":
        m["rollout_is_max"] = math.exp(min(metric_log_ratio.max().item(), SAFETY_BOUND))
        m["rollout_is_min"] = math.exp(metric_log_ratio.min().item())
        m["rollout_is_ratio_fraction_high"] = (metric_log_ratio > math.log(upper)).float().mean().item()
        m["rollout_is_ratio_fraction_low"] = (metric_log_ratio < math.log(low)).float().mean().item()
    else:
        valid = mask.bool()
        m["rollout_is_max"] = weights[valid].max().item()
        m["rollout_is_min"] = weights[valid].min().item()
        m["rollout_is_ratio_fraction_high"] = masked_mean((raw > upper).to(mask.dtype), mask).item()
        m["rollout_is_ratio_fraction_low"] = masked_mean((raw < low).to(mask.dtype), mask).item()
    capped = weights.clamp(0.0, upper)
    mean = masked_mean(capped, mask)
    m["rollout_is_std"] = (masked_mean(capped.square(), mask) - mean.square()).clamp_min(0).sqrt().item() \
        if mask.sum() > 1 else 0.0
    # effective sample size as a fraction of the tokens: 1 / E[(w / E[w])^2]
    m["rollout_is_eff_sample_size"] = 1.0 / masked_mean((capped / (mean + 1e-8)).square(), mask).item()
    # per-sequence view: each row's mean weight
    seq = masked_mean(weights, mask, dim=-1)
    raw_seq = masked_mean(raw, mask, dim=-1)
    m["rollout_is_seq_mean"] = seq.mean().item()
    m["rollout_is_seq_std"] = seq.std().item() if seq.numel() > 1 else 0.0
    m["rollout_is_seq_max"] = seq.max().item()
    m["rollout_is_seq_min"] = seq.min().item()
    m["rollout_is_seq_max_deviation"] = (seq - 1.0).abs().max().item()
    m["rollout_is_seq_fraction_high"] = (raw_seq > upper).float().mean().item()
    m["rollout_is_seq_fraction_low"] = (raw_seq < low).float().mean().item()
    if lower is not None:
        m["rollout_is_oob_ratio"] = masked_mean(((raw < lower) | (raw > upper)).to(mask.dtype), mask).item()
    if batch_normalize:
        if level == "token":
            norm = masked_mean(weights, mask)
        else:
            rows = (mask.sum(-1) > 0).to(mask.dtype)
            norm = (masked_mean(weights, mask, dim=-1) * rows).sum() / rows.sum().clamp_min(1e-8)
        if norm > 1e-8:
            weights = weights / norm
        m["rollout_is_batch_norm_factor"] = norm.item() if norm > 1e-8 else 1.0
    return weights, m


def rejection_mask(log_ratio: torch.Tensor, response_mask: torch.Tensor, options: str,
                   thresholds: str | float | None) -> tuple[torch.Tensor, dict[str, float]]:
    """The response mask with rejected tokens (token_*) or rows (seq_*) set to 0, and the rejected fractions."""
    bounds = parse_rs(options, thresholds)
    mask = response_mask.to(log_ratio.dtype)
    valid = mask.bool()
    lr = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    per_token = {"k1": -lr, "k2": 0.5 * lr.square(), "k3": torch.exp(lr) - 1.0 - lr}
    keep = torch.ones_like(valid)
    m: dict[str, float] = {}
    rows_valid = valid.any(-1)
    for name, (lower, upper) in bounds.items():
        level, k = name.rsplit("_", 1)
        stat = per_token[k]
        if level == "seq_sum":
            stat = masked_sum(stat, mask, dim=-1)[:, None]
        elif level == "seq_mean":
            stat = masked_mean(stat, mask, dim=-1)[:, None]
        elif level == "seq_max":
            top = stat.masked_fill(~valid, -torch.inf).max(-1).values
            stat = torch.where(torch.isinf(top), torch.zeros_like(top), top)[:, None]
        ok = (stat <= upper) if lower is None else ((stat >= lower) & (stat <= upper))
        ok = ok.expand_as(valid)
        keep = keep & ok
        m[f"rollout_rs_{name}_masked_fraction"] = masked_mean((~ok).to(mask.dtype), mask).item()
        rejected_rows = (~ok & valid).any(-1) & rows_valid
        m[f"rollout_rs_{name}_seq_masked_fraction"] = (rejected_rows.sum() / rows_valid.sum().clamp_min(1)).item()
    m["rollout_rs_masked_fraction"] = masked_mean((~keep).to(mask.dtype), mask).item()
    m["rollout_rs_seq_masked_fraction"] = (~keep & valid).any(-1).float().mean().item()
    return (response_mask * keep.to(response_mask.dtype)), m


def mismatch_metrics(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                     response_mask: torch.Tensor) -> dict[str, float]:
    """How far the rollout's distribution is from the actor's on the sampled tokens (verl's off-policy metrics)."""
    mask = response_mask.to(old_log_prob.dtype)
    log_ratio = old_log_prob - rollout_log_prob
    train_lp = masked_mean(old_log_prob, mask, dim=-1)
    roll_lp = masked_mean(rollout_log_prob, mask, dim=-1)
    log_ppl_diff = roll_lp - train_lp
    seq_log_ratio = masked_sum(log_ratio, mask, dim=-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    rho = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    return {
        "training_ppl": torch.exp(-train_lp).mean().item(),
        "training_log_ppl": (-train_lp).mean().item(),
        "kl": masked_mean(rollout_log_prob - old_log_prob, mask).item(),
        "k3_kl": masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask).item(),
        "rollout_ppl": torch.exp(-roll_lp).mean().item(),
        "rollout_log_ppl": (-roll_lp).mean().item(),
        "log_ppl_diff": log_ppl_diff.mean().item(),
        "log_ppl_abs_diff": log_ppl_diff.abs().mean().item(),
        "log_ppl_diff_max": log_ppl_diff.max().item(),
        "log_ppl_diff_min": log_ppl_diff.min().item(),
        "ppl_ratio": torch.exp(log_ppl_diff).mean().item(),
        "chi2_token": (masked_mean(rho.square(), mask) - 1.0).item(),
        "chi2_seq": (torch.exp(2.0 * seq_log_ratio).mean() - 1.0).item(),
    }


def rollout_correction(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor, *,
                       rollout_is: str | None = None, rollout_is_threshold: str | float | None = 2.0,
                       rollout_is_batch_normalize: bool = False, rollout_rs: str | None = None,
                       rollout_rs_threshold: str | float | None = None,
                       ) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """(importance weights or None, response mask after rejection, `rollout_corr/*` metrics)."""
    if old_log_prob.shape != rollout_log_prob.shape or old_log_prob.shape != response_mask.shape:
        raise ValueError(f"shapes differ: old {tuple(old_log_prob.shape)}, rollout {tuple(rollout_log_prob.shape)}, "
                         f"mask {tuple(response_mask.shape)}")
    if not response_mask.any():
        return None, response_mask, {}
    log_ratio = old_log_prob - rollout_log_prob
    metrics: dict[str, float] = {}
    weights = None
    if rollout_is is not None and rollout_is_threshold is not None:
        weights, m = importance_weights(log_ratio, response_mask, rollout_is, rollout_is_threshold,
                                        rollout_is_batch_normalize)
        metrics.update(m)
    mask = response_mask
    if rollout_rs is not None:
        mask, m = rejection_mask(log_ratio, response_mask, rollout_rs, rollout_rs_threshold)
        metrics.update(m)
    metrics.update(mismatch_metrics(old_log_prob, rollout_log_prob, response_mask))
    return weights, mask, {f"rollout_corr/{k}": v for k, v in metrics.items()}
