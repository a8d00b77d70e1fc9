"""DAPO's dynamic sampling (verl `algorithm.filter_groups`): a group whose samples all score the same has zero
group-relative advantage, so it only dilutes the batch. Such groups are dropped and more prompts generated until
the batch holds `train_batch_size` groups with a learning signal. Pure functions; the loop is the trainer's."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch



def rows_with_signal(metric: torch.Tensor, uids: Sequence[Any]) -> tuple[list[int], int, int]:
    """(rows to keep, groups kept, groups seen): the rows of groups whose metric is not constant; a group of one
    sample is kept (verl: std > 0 or a single sample)."""
    values = metric.detach().to(torch.float64).cpu().tolist()
    groups: dict[Any, list[int]] = {}
    for row, uid in enumerate(list(uids)):
        groups.setdefault(uid, []).append(row)
    keep: list[int] = []
    kept = 0
    for rows in groups.values():
        group_values = [values[r] for r in rows]
        if len(rows) == 1 or max(group_values) != min(group_values):
            keep.extend(rows)
            kept += 1
    return sorted(keep), kept, len(groups)
