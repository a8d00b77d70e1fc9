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

SAFETY_BOUND = 20.0  # exp(±20) stays finite in fp32
RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3", "seq_mean_k1",
              "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")


def parse_is_threshold(spec: str | float) -> tuple[float, float | None]:
    """(upper, lower or None): a number is TIS's upper bound; "lower_upper" is IcePop's band."""
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ValueError(f"rollout_is_threshold must be a number or 'lower_upper', got {spec!r}")
    text = str(spec).strip()
    try:
        lower, upper = (float(x) for x in text.split("_", 1)) if "_" in text else (None, float(text))
    except ValueError:
        raise ValueError(f"rollout_is_threshold {spec!r} is neither a number nor 'lower_upper' (e.g. 0.5_2.0)") \
            from None
    if upper <= 0 or (lower is not None and not 0 < lower <= upper):
        raise ValueError(f"rollout_is_threshold {spec!r}: bounds must be positive with lower <= upper")
    return upper, lower


def parse_rs(options: str, thresholds: str | float | None) -> dict[str, tuple[float | None, float]]:
    """{option: (lower, upper)} in the statistic's own units (log-ratio for k1, divergence otherwise)."""
    names = list(dict.fromkeys(o.strip() for o in str(options).split(",") if o.strip()))
    bad = [o for o in names if o not in RS_OPTIONS]
    if not names or bad:
        raise ValueError(f"rollout_rs {options!r}: unknown option(s) {bad}; valid: {', '.join(RS_OPTIONS)}")
    if thresholds is None:
        raise ValueError("rollout_correction.rollout_rs needs rollout_rs_threshold (e.g. 2.0, or 0.5_2.0 for k1)")
    specs = [s.strip() for s in str(thresholds).split(",") if s.strip()]
    if len(specs) == 1:
        specs = specs * len(names)
    if len(specs) != len(names):
        raise ValueError(f"rollout_rs_threshold: give one threshold or one per option ({len(names)})")
    out = {}
    for name, spec in zip(names, specs):
        try:
            if name.endswith("k1"):
                lower, upper = (float(x) for x in spec.split("_", 1)) if "_" in spec else (1 / float(spec),
                                                                                         float(spec))
                if not 0 < lower <= upper:
                    raise ValueError
                out[name] = (math.log(lower), math.log(upper))
            else:
                upper = float(spec)
                if upper <= 0:
                    raise ValueError
                out[name] = (None, upper)
        except ValueError:
            raise ValueError(f"rollout_rs_threshold {spec!r} for {name}: positive number(s) expected"
                             + (" ('lower_upper' or one upper bound)" if name.endswith("k1") else "")) from None
    return out


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
