"""Which groups a step trains: the failed groups (a reward function that raised for one of their answers;
failed_groups.py) and, with DAPO's dynamic sampling (`algorithm.filter_groups`), the groups whose metric does not
differ between their samples are evicted, and refills generated until `data.train_batch_size` groups are kept.

`keep_groups` is pure: it reads the scored batches it is given and asks `more` for refills; the sync trainer
(batches.py) and the async modes' rollout thread (asynchronous/driver.py) call it alike.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from engine.algos.dynamic_sampling import rows_with_signal
from engine.protocol import Batch
from engine.reward.manager import RewardResult
from engine.trainer import failed_groups

DAPO_LIMIT_KEY = "algorithm.filter_groups.max_num_gen_batches"


@dataclass
class Evicted:
    """Rows that never reach the update: a failed group's (`failed`), or a group without a learning signal."""
    batch: Batch
    reward: RewardResult
    failed: bool


@dataclass
class Selection:
    """The step's kept groups, what was evicted (in the order generated) and verl's counts of it."""
    batch: Batch
    reward: RewardResult
    evicted: list[Evicted] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class _Judged:
    """One generation batch after eviction."""
    batch: Batch
    reward: RewardResult
    seen: int  # groups generated
    kept: int
    failed: int  # groups evicted for a failed reward
    first_failure: str | None
    evicted: list[Evicted]


def filter_metric(batch: Batch, reward: RewardResult, name: str) -> torch.Tensor:
    """Per-row value that must differ within a group (verl's filter_groups.metric)."""
    if name in ("reward", "seq_reward", "seq_final_reward"):  # final = after the KL penalty, which is refused with filtering
        return batch["token_level_scores"].sum(-1)
    column = reward.extra.get(name)
    if column is not None and all(isinstance(x, (int, float)) for x in column):
        return torch.tensor([float(x) for x in column])
    return torch.tensor(reward.scores if name == "score" or column is None else [float(x) for x in column])


def _split(batch: Batch, reward: RewardResult, rows: list[int], failed: bool) -> tuple[Batch, RewardResult, list]:
    """(the rows kept, their reward, the others as an eviction: none when every row is kept)."""
    kept = set(rows)
    out = [i for i in range(len(batch)) if i not in kept]
    evicted = [Evicted(batch.index(torch.tensor(out, dtype=torch.long)), reward.select(out), failed)] if out else []
    return batch.index(torch.tensor(rows, dtype=torch.long)), reward.select(rows), evicted


def _judge(batch: Batch, reward: RewardResult, filter_groups) -> _Judged:
    """Evict a generation batch's failed groups, then (DAPO's filter) those without a learning signal."""
    rows, failed = failed_groups.rows_without_failures(reward.failed, batch["uid"])
    first_failure = reward.failed[min(reward.failed)] if failed else None
    evicted: list[Evicted] = []
    if failed:
        batch, reward, evicted = _split(batch, reward, rows, failed=True)
    seen = kept = len(set(batch["uid"].tolist())) if len(batch) else 0
    if filter_groups.enable:  # among the groups that scored without error
        rows, kept, seen = rows_with_signal(filter_metric(batch, reward, filter_groups.metric), batch["uid"])
        batch, reward, no_signal = _split(batch, reward, rows, failed=False)
        evicted += no_signal
    return _Judged(batch, reward, seen + len(failed), kept, len(failed), first_failure, evicted)


def keep_groups(batch: Batch, reward: RewardResult, more: Callable[..., tuple[Batch, RewardResult]], *, want: int,
                rollout_n: int, filter_groups, step: int, sync: bool) -> Selection:
    """Evict the groups step `step` cannot train and refill from `more()` until `want` groups are kept, then cut to
    exactly that many. DAPO's refills are whole loader batches (`more()`), a failure's alone exactly the missing
    groups (`more(k)`). Raises when refills keep failing past a bound (failed_groups.MAX_GEN_BATCHES, or DAPO's
    max_num_gen_batches > 0); `sync`: whether the error names the sync trainer's switch."""
    judged = [_judge(batch, reward, filter_groups)]
    dapo_limit = filter_groups.enable and 0 < filter_groups.max_num_gen_batches
    limit = filter_groups.max_num_gen_batches if dapo_limit else failed_groups.MAX_GEN_BATCHES
    while (kept := sum(j.kept for j in judged)) < want:
        failed = sum(j.failed for j in judged)
        if failed and len(judged) >= limit:
            first = next(j.first_failure for j in judged if j.first_failure)
            raise failed_groups.limit_error(first, failed, len(judged), kept, want, step, sync=sync, limit=limit,
                                            limit_key=DAPO_LIMIT_KEY if dapo_limit else None)
        if dapo_limit and len(judged) >= limit:
            raise RuntimeError(
                f"algorithm.filter_groups: {len(judged)} generation batches gave {kept} of {want} groups whose "
                f"samples score differently (max_num_gen_batches={limit}); the data may be too easy or too hard for "
                "the model: raise max_num_gen_batches (<= 0: no limit) or change the data")
        judged.append(_judge(*(more() if filter_groups.enable else more(want - kept)), filter_groups))
    evicted = [e for j in judged for e in j.evicted]
    failed = sum(j.failed for j in judged)
    if not filter_groups.enable and not failed:  # nothing evicted: the batch as generated, and no metrics
        return Selection(judged[-1].batch, judged[-1].reward)
    rows = list(range(want * rollout_n))
    batch = Batch.concat([j.batch for j in judged]).index(rows)
    reward = RewardResult.concat([j.reward for j in judged]).select(rows)
    metrics = {"train/num_gen_batches": len(judged),
               "train/kept_group_fraction": kept / sum(j.seen for j in judged)}
    if filter_groups.enable:  # verl V1's counts, in groups: dropped for no signal, and kept ones cut to fit the batch
        metrics["training/filter_groups/evicted_samples"] = sum(j.seen - j.failed - j.kept for j in judged)
        metrics["training/filter_groups/discarded_surplus_samples"] = kept - want
    if failed:  # verl V1's count of evicted failed groups (only logged when some were, as verl's)
        metrics[failed_groups.METRIC] = failed
    return Selection(batch, reward, evicted, metrics)
