"""Each generated token's policy version, and verl's off-policy metrics computed from them (pure functions).

A policy version is the number of actor updates applied to the weights that produced the token. The batch holds
them as `policy_versions` (rows × response tokens, like `responses`); in the sync trainer every token of step s has
version s - 1. A trajectory spans the versions [oldest, newest] of its response tokens; verl's v1 trainer reports
(trainer_base.py, "off-policy staleness metrics"), with step s training on version s - 1:
- training/off_policy/trajectory_spans/*: newest - oldest + 1 (1 = one version produced the whole answer)
- training/off_policy/trajectory_staleness/*: (s - 1) - newest (how far the freshest token lags)
- training/off_policy/trajectory_staleness_worst/*: (s - 1) - oldest
each as mean, max and min over the step's trajectories.
"""
from __future__ import annotations

import torch

KEY = "policy_versions"
PREFIX = "training/off_policy"


def stamp(responses: torch.Tensor, version: int) -> torch.Tensor:
    """Versions for a batch generated entirely with weights of `version` (no weight update mid-answer)."""
    return torch.full(responses.shape, int(version), dtype=torch.long)


def trajectory_versions(versions: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(oldest, newest) version per row over its response tokens; a row without tokens counts its first position's
    (the version that was asked to answer it)."""
    mask = response_mask.bool()
    empty = ~mask.any(dim=1)
    mask = mask.clone()
    mask[empty, 0] = True
    big = torch.iinfo(torch.long).max
    oldest = torch.where(mask, versions, torch.full_like(versions, big)).min(dim=1).values
    newest = torch.where(mask, versions, torch.full_like(versions, -big)).max(dim=1).values
    return oldest, newest


def off_policy_metrics(versions: torch.Tensor, response_mask: torch.Tensor, step: int) -> dict[str, float]:
    """verl's training/off_policy/trajectory_{spans,staleness,staleness_worst}/{mean,max,min} for a batch trained
    at `step` (1-based: it trains on version step - 1)."""
    if versions.numel() == 0:
        return {}
    oldest, newest = trajectory_versions(versions, response_mask)
    current = step - 1
    out = {}
    for name, values in (("trajectory_spans", newest - oldest + 1), ("trajectory_staleness", current - newest),
                         ("trajectory_staleness_worst", current - oldest)):
        values = values.double()
        out[f"{PREFIX}/{name}/mean"] = values.mean().item()
        out[f"{PREFIX}/{name}/max"] = values.max().item()
        out[f"{PREFIX}/{name}/min"] = values.min().item()
    return out
