"""PPO-family losses on [B, R] token tensors: loss aggregation, policy (with a registry), value, entropy."""

from __future__ import annotations

from collections.abc import Callable

import torch

from engine.algos.utils import masked_count, masked_mean, masked_sum
from engine.config.vocab import LossAggMode, names

# ---- aggregation -----------------------------------------------------------------------------------

LOSS_AGG_MODES = names(LossAggMode)  # declared once, in the config vocabulary


def _mean_over_nonempty_rows(per_row: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    # Rows without a single valid token (e.g. micro-batch padding) would otherwise dilute the mean.
    has_tokens = (masked_count(loss_mask, loss_mask, dim=-1) > 0).to(per_row.dtype)
    return masked_mean(per_row, has_tokens)


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str,
             norm_length: float | None = None) -> torch.Tensor:
    """Reduce a [B, R] per-token loss to a scalar.

    token-mean: sum over valid tokens / number of valid tokens.
    token-sum: sum over valid tokens.
    seq-mean-token-sum: per-row sum over valid tokens, mean over rows.
    seq-mean-token-mean: per-row mean over valid tokens, mean over rows.
    seq-mean-token-sum-norm (Dr.GRPO): seq-mean-token-sum / a constant, so long answers are not down-weighted:
    `norm_length` when given (verl's actor.loss_scale_factor, or the full response length of a micro-batch
    whose padding was trimmed), else the mask's width R.
    The seq-mean modes average over rows with at least one valid token; every mode gives 0 when there are
    no valid tokens at all.
    """
    loss_mask = loss_mask.to(device=loss_mat.device, dtype=loss_mat.dtype)
    if loss_agg_mode == "token-mean":
        return masked_mean(loss_mat, loss_mask)
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask)
    if loss_agg_mode == "seq-mean-token-sum":
        return _mean_over_nonempty_rows(masked_sum(loss_mat, loss_mask, dim=-1), loss_mask)
    if loss_agg_mode == "seq-mean-token-mean":
        return _mean_over_nonempty_rows(masked_mean(loss_mat, loss_mask, dim=-1), loss_mask)
    if loss_agg_mode == "seq-mean-token-sum-norm":
        seq_mean = _mean_over_nonempty_rows(masked_sum(loss_mat, loss_mask, dim=-1), loss_mask)
        return seq_mean / (norm_length or loss_mask.shape[-1])
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; valid modes: {', '.join(LOSS_AGG_MODES)}")


# ---- policy loss -----------------------------------------------------------------------------------

PolicyLoss = Callable[..., dict[str, torch.Tensor]]

POLICY_LOSSES: dict[str, PolicyLoss] = {}


def register_policy_loss(name: str) -> Callable[[PolicyLoss], PolicyLoss]:
    """Decorator that registers a policy loss under `name` (names are unique)."""

    def decorator(fn: PolicyLoss) -> PolicyLoss:
        if name in POLICY_LOSSES and POLICY_LOSSES[name] is not fn:
            raise ValueError(f"policy loss {name!r} is already registered")
        POLICY_LOSSES[name] = fn
        return fn

    return decorator


def get_policy_loss(name: str) -> PolicyLoss:
    try:
        return POLICY_LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown policy loss {name!r}; valid names: {', '.join(sorted(POLICY_LOSSES))}") from None


# exp(20) ~ 4.9e8: far past any clip range, yet finite in fp32 and bf16, so gradients stay finite.
LOG_RATIO_CLAMP = 20.0


@register_policy_loss("vanilla")
def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    norm_length: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """PPO clipped surrogate with dual clip (arXiv:1912.09729) for negative advantages.

    Returns pg_loss (differentiable scalar) and detached metrics: pg_clipfrac (share of valid tokens where
    the ratio clip is active), pg_clipfrac_lower (share where the dual clip bounds the loss) and ppo_kl
    (mean of old_log_prob - log_prob). `rollout_is_weights` (rollout correction, detached) multiply the
    per-token losses before aggregation.
    """
    if not clip_ratio_c > 1.0:
        raise ValueError(f"clip_ratio_c must be > 1.0 for the dual clip, got {clip_ratio_c}")
    mask = response_mask.to(log_prob.dtype)

    log_ratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)

    unclipped = -advantages * ratio
    ratio_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    clipped = torch.maximum(unclipped, ratio_clipped)

    # Dual clip: for A < 0 a huge ratio would make the loss unbounded; cap it at -A * c.
    dual_bound = -advantages * clip_ratio_c
    dual_clipped = torch.minimum(clipped, dual_bound)
    negative = advantages < 0
    pg_losses = torch.where(negative, dual_clipped, clipped)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights

    with torch.no_grad():
        pg_clipfrac = masked_mean((ratio_clipped > unclipped).to(mask.dtype), mask)
        pg_clipfrac_lower = masked_mean(((clipped > dual_bound) & negative).to(mask.dtype), mask)
        ppo_kl = masked_mean(old_log_prob - log_prob, mask)

    return {
        "pg_loss": agg_loss(pg_losses, mask, loss_agg_mode, norm_length),
        "pg_clipfrac": pg_clipfrac,
        "ppo_kl": ppo_kl,
        "pg_clipfrac_lower": pg_clipfrac_lower,
    }


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    norm_length: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """GSPO (arXiv:2507.18071): PPO clipping on the sequence-level ratio s = exp(mean over the row's tokens of
    log(pi / pi_old)), the geometric mean of the token ratios. Each token's loss uses s with the token's own
    log-prob as the path of the gradient: log s_t = sg(log s) + log_prob - sg(log_prob), so every token of a row
    gets s times its own score-function gradient. No dual clip (clip_ratio_c is unused); pg_clipfrac_lower is 0.
    """
    mask = response_mask.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob
    seq_log_ratio = masked_sum(log_ratio, mask, dim=-1) / mask.sum(-1).clamp_min(1)
    log_token_ratio = log_prob - log_prob.detach() + seq_log_ratio.detach()[:, None]
    ratio = torch.exp(torch.clamp(log_token_ratio, max=10.0))  # upper clamp only, as verl: stability

    unclipped = -advantages * ratio
    ratio_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    pg_losses = torch.maximum(unclipped, ratio_clipped)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    with torch.no_grad():
        pg_clipfrac = masked_mean((ratio_clipped > unclipped).to(mask.dtype), mask)
        ppo_kl = masked_mean(-log_ratio, mask)
    return {
        "pg_loss": agg_loss(pg_losses, mask, loss_agg_mode, norm_length),
        "pg_clipfrac": pg_clipfrac,
        "ppo_kl": ppo_kl,
        "pg_clipfrac_lower": torch.zeros((), dtype=mask.dtype, device=mask.device),
    }


# ---- value and entropy -----------------------------------------------------------------------------


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    cliprange_value: float | None,
    loss_agg_mode: str = "token-mean",
    norm_length: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss: 0.5 * agg(max((v - R)^2, (v_clipped - R)^2)), v_clipped within ±c of the old values.

    cliprange_value=None disables clipping. Returns (vf_loss, vf_clipfrac) with vf_clipfrac detached: the
    share of valid tokens where the clipped error is the larger one.
    """
    mask = response_mask.to(vpreds.dtype)
    if cliprange_value is None:
        vpreds_clipped = vpreds
    else:
        vpreds_clipped = values + torch.clamp(vpreds - values, -cliprange_value, cliprange_value)
    unclipped_loss = (vpreds - returns) ** 2
    clipped_loss = (vpreds_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(torch.maximum(unclipped_loss, clipped_loss), mask, loss_agg_mode, norm_length)
    with torch.no_grad():
        vf_clipfrac = masked_mean((clipped_loss > unclipped_loss).to(mask.dtype), mask)
    return vf_loss, vf_clipfrac
