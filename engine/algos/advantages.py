"""Advantage estimators (verl names and semantics) behind a name -> function registry.

Every estimator takes keyword arguments only and returns (advantages, returns), both [B, R] and zero at
padded positions. Advantages are training targets, so estimators run under no_grad.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from engine.algos.utils import masked_whiten

AdvEstimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]

ADV_ESTIMATORS: dict[str, AdvEstimator] = {}


def register_adv_estimator(name: str) -> Callable[[AdvEstimator], AdvEstimator]:
    """Decorator that registers an estimator under `name` (names are unique)."""

    def decorator(fn: AdvEstimator) -> AdvEstimator:
        if name in ADV_ESTIMATORS and ADV_ESTIMATORS[name] is not fn:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADV_ESTIMATORS[name] = fn
        return fn

    return decorator


def get_adv_estimator(name: str) -> AdvEstimator:
    try:
        return ADV_ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"unknown advantage estimator {name!r}; valid names: {', '.join(sorted(ADV_ESTIMATORS))}"
        ) from None


# ---- grouping --------------------------------------------------------------------------------------


class GroupStats(NamedTuple):
    """Per-row statistics of each row's group (rows sharing an index id).

    Conventions (the ones GRPO relies on): a group of size 1 reports mean 0 and std 1; a degenerate
    group (size >= 2, all scores equal) reports its common score exactly as mean and std 0, so that
    score - mean is exactly 0 rather than float noise.
    """

    mean: torch.Tensor  # [B]
    std: torch.Tensor  # [B], unbiased
    size: torch.Tensor  # [B], long: number of rows in the row's group
    degenerate: torch.Tensor  # [B], bool: the row's group is degenerate
    num_groups: int
    num_degenerate: int  # groups of size >= 2 whose scores are all equal (zero learning signal)


def _group_ids(index: Sequence[Any], batch_size: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """Dense 0..G-1 ids for arbitrary hashable group keys, in order of first appearance."""
    if index is None:
        raise ValueError("this advantage estimator needs `index` (the group id of each row)")
    keys = index.tolist() if hasattr(index, "tolist") else list(index)
    if len(keys) != batch_size:
        raise ValueError(f"index has {len(keys)} entries but the batch has {batch_size} rows")
    dense: dict[Any, int] = {}
    ids = [dense.setdefault(key, len(dense)) for key in keys]
    return torch.tensor(ids, dtype=torch.long, device=device), len(dense)


def compute_group_stats(scores: torch.Tensor, index: Sequence[Any]) -> GroupStats:
    """Group mean/std of 1-D `scores` broadcast back to rows, plus degenerate-group counts."""
    if scores.dim() != 1:
        raise ValueError(f"scores must be 1-D [B], got shape {tuple(scores.shape)}")
    gid, num_groups = _group_ids(index, scores.shape[0], scores.device)
    # float64 keeps group means of identical-ish scores from drifting; cast back at the end.
    s = scores.detach().to(torch.float64)
    zeros = torch.zeros(num_groups, dtype=torch.float64, device=s.device)

    size = torch.bincount(gid, minlength=num_groups)
    mean = zeros.index_add(0, gid, s) / size
    sq_dev = zeros.index_add(0, gid, (s - mean[gid]) ** 2)
    std = torch.sqrt(torch.where(size > 1, sq_dev / (size - 1).clamp_min(1), torch.ones_like(sq_dev)))

    g_max = torch.full_like(zeros, -torch.inf).scatter_reduce(0, gid, s, "amax", include_self=False)
    g_min = torch.full_like(zeros, torch.inf).scatter_reduce(0, gid, s, "amin", include_self=False)
    degenerate = (size > 1) & (g_max == g_min)

    singleton = size == 1
    mean = torch.where(degenerate, g_max, torch.where(singleton, torch.zeros_like(mean), mean))
    std = torch.where(degenerate, torch.zeros_like(std), std)
    return GroupStats(
        mean=mean[gid].to(scores.dtype),
        std=std[gid].to(scores.dtype),
        size=size[gid],
        degenerate=degenerate[gid],
        num_groups=num_groups,
        num_degenerate=int(degenerate.sum()),
    )


def _sequence_scores(token_level_rewards: torch.Tensor) -> torch.Tensor:
    # Token-level rewards are zero off the scored tokens, so the row sum is the sequence score.
    return token_level_rewards.sum(dim=-1)


# ---- estimators ------------------------------------------------------------------------------------


@register_adv_estimator("gae")
@torch.no_grad()
def compute_gae_advantage_return(
    *,
    token_level_rewards: torch.Tensor,
    values: torch.Tensor | None,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over valid tokens; returns = raw advantages + values, advantages whitened over valid tokens.

    The running value/advantage carried backwards only updates on valid tokens (mask > 0), so the step
    after a row's last valid token has value 0 and advantage 0, and masked holes are skipped.
    """
    if values is None:
        raise ValueError("the 'gae' estimator needs `values` from the critic")
    rewards = token_level_rewards
    values = values.to(rewards.dtype)
    valid = response_mask.to(rewards.device) > 0
    mask = response_mask.to(rewards.dtype)

    next_value = torch.zeros_like(rewards[:, 0])
    next_advantage = torch.zeros_like(rewards[:, 0])
    advantages = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage_t = delta + gamma * lam * next_advantage
        # torch.where (not a mask product) so garbage in padded values cannot leak as NaN.
        next_advantage = torch.where(valid[:, t], advantage_t, next_advantage)
        next_value = torch.where(valid[:, t], values[:, t], next_value)
        advantages[:, t] = torch.where(valid[:, t], advantage_t, torch.zeros_like(advantage_t))

    returns = torch.where(valid, advantages + values, torch.zeros_like(advantages))
    advantages = masked_whiten(advantages, mask) * mask
    return advantages, returns


@register_adv_estimator("grpo")
@torch.no_grad()
def compute_grpo_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(score - group mean) / (group std + epsilon), or without the std division; one value per row."""
    scores = _sequence_scores(token_level_rewards)
    stats = compute_group_stats(scores, index)
    advantage = scores - stats.mean
    if norm_adv_by_std_in_grpo:
        advantage = advantage / (stats.std + epsilon)
    advantages = advantage[:, None] * response_mask.to(scores.dtype)
    return advantages, advantages


@register_adv_estimator("rloo")
@torch.no_grad()
def compute_rloo_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
) -> tuple[torch.Tensor, torch.Tensor]:
    """score - mean of the other rows of the group; a size-1 group keeps its raw score."""
    scores = _sequence_scores(token_level_rewards)
    stats = compute_group_stats(scores, index)
    n = stats.size.to(scores.dtype)
    # score - (sum - score)/(n-1) == (score - mean) * n/(n-1); the latter is exactly 0 for degenerate groups.
    # Size-1 groups: stats.mean is 0 by convention and the factor is 1, leaving the score.
    factor = torch.where(stats.size > 1, n / (n - 1).clamp_min(1), torch.ones_like(n))
    advantage = (scores - stats.mean) * factor
    advantages = advantage[:, None] * response_mask.to(scores.dtype)
    return advantages, advantages


@register_adv_estimator("reinforce_plus_plus")
@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Discounted return-to-go per token (reset at masked positions), whitened over valid tokens."""
    mask = response_mask.to(token_level_rewards.dtype)
    returns = torch.zeros_like(token_level_rewards)
    running = torch.zeros_like(token_level_rewards[:, 0])
    for t in reversed(range(token_level_rewards.shape[1])):
        running = token_level_rewards[:, t] + gamma * running
        returns[:, t] = running
        running = running * mask[:, t]
    returns = returns * mask
    advantages = masked_whiten(returns, mask) * mask
    return advantages, returns


@register_adv_estimator("reinforce_plus_plus_baseline")
@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
) -> tuple[torch.Tensor, torch.Tensor]:
    """score - group mean on every valid token, then whitened over all valid tokens of the batch."""
    scores = _sequence_scores(token_level_rewards)
    stats = compute_group_stats(scores, index)
    mask = response_mask.to(scores.dtype)
    centred = (scores - stats.mean)[:, None] * mask
    advantages = masked_whiten(centred, mask) * mask
    return advantages, advantages


@register_adv_estimator("remax")
@torch.no_grad()
def compute_remax_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    reward_baselines: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Undiscounted return-to-go minus the greedy sample's score of the same row."""
    if reward_baselines is None:
        raise ValueError("the 'remax' estimator needs `reward_baselines` (the greedy sample's score per row)")
    mask = response_mask.to(token_level_rewards.dtype)
    returns = (token_level_rewards * mask).flip(-1).cumsum(-1).flip(-1)
    advantages = (returns - reward_baselines.to(returns.dtype)[:, None]) * mask
    return advantages, returns


# ---- dispatcher ------------------------------------------------------------------------------------


def _accepted_kwargs(fn: Callable, available: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(available)
    return {name: value for name, value in available.items() if name in params}


def compute_advantage(
    name: str,
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    values: torch.Tensor | None = None,
    index: Sequence[Any] | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True,
    reward_baselines: torch.Tensor | None = None,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the estimator registered as `name`, passing it only the arguments its signature names."""
    estimator = get_adv_estimator(name)
    available = {
        "token_level_rewards": token_level_rewards,
        "response_mask": response_mask,
        "values": values,
        "index": index,
        "gamma": gamma,
        "lam": lam,
        "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo,
        "reward_baselines": reward_baselines,
        "epsilon": epsilon,
    }
    return estimator(**_accepted_kwargs(estimator, available))
