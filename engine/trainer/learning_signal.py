"""Learning signal per step: the share of groups (the n answers of one prompt, one `uid`) whose scores are all
equal. Such a group gives every answer the same group-relative advantage (0 for GRPO, RLOO, ...): the prompt
teaches nothing this step. DAPO's dynamic sampling (algorithm.filter_groups) drops exactly these groups; this
metric counts them whether or not the filter is on, over every group generated in the step (before the filter),
so a run can see how much of its generation is wasted (one report: ~40% of GRPO prompts while every other
metric looked healthy).

Metric: `train/zero_std_group_ratio` (next to the filter's `train/num_gen_batches` and `train/kept_group_fraction`;
"zero std" is the filter's own test, verl's `metric std == 0`), logged each step when rollout.n > 1. With the
filter on and its metric the reward, it equals 1 - `train/kept_group_fraction`. `critic/degenerate_group_ratio`
is the same share over the batch that was trained on (0 with the filter on). Which prompts: the stored samples
carry `group_uid` (this step's group) and `prompt_index` (the data set row, stable across steps).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from engine import metric_names

METRIC = metric_names.ZERO_STD_GROUP_RATIO


def zero_std_groups(scores: torch.Tensor, uids: Sequence[Any]) -> tuple[int, int]:
    """(groups whose scores are all equal, groups) over the groups of at least two answers; exact equality, the
    filter's test, so the two never disagree about a group."""
    values = scores.detach().to(torch.float64).cpu().tolist()
    groups: dict[Any, list[float]] = {}
    for uid, value in zip(list(uids), values, strict=True):
        groups.setdefault(uid, []).append(value)
    sized = [g for g in groups.values() if len(g) > 1]  # a lone answer has no group to compare with
    return sum(1 for g in sized if max(g) == min(g)), len(sized)
