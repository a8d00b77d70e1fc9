"""Validation statistics under verl's names (verl 0.9.1 `metric_utils.process_validation_metrics` and
`RayPPOTrainer._val_metrics_update`), for `actor_rollout_ref.rollout.val_kwargs.n` answers per prompt.

Per data source and per variable (`reward`, the summed score of each answer, plus every numeric column a reward
function returns, e.g. `acc`), each prompt's N answers give

    mean@N, std@N                              the N values' mean and (population) std
    best@k/mean, best@k/std                    bootstrap: 1000 draws of k of the N values with replacement, the
    worst@k/mean, worst@k/std                  draws' max (min): their mean and std — best@k/mean is pass@k for a
    maj@k/mean, maj@k/std                      0/1 score; maj: the value of the answer whose `pred` won the vote

for k = 2, 4, 8, … < N and k = N (no k when N = 1), and each statistic is averaged over the prompts. `maj@k` exists
where the reward returns a `pred` column (the extracted answer) for every answer. The draws use seed 42 for every
(prompt, variable, k), as verl does, so the numbers equal verl's on the same inputs (tests/unit/test_validation_metrics.py).

Flat names: `val-core/<source>/<var>/<stat>` for the core variable (`acc` when the reward returns it, else
`reward`) and its mean/maj/best statistics at the largest k (= N); everything else is `val-aux/...`. With N = 1 this
is the engine's historical `val-core/<source>/reward/mean@1`.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from engine import metric_names

N_BOOTSTRAP = 1000
SEED = 42


def subset_sizes(n: int) -> list[int]:
    """The bootstrap subset sizes for n answers: 2, 4, 8, … below n, then n itself (none for n <= 1)."""
    if n <= 1:
        return []
    sizes, k = [], 2
    while k < n:
        sizes.append(k)
        k *= 2
    return sizes + [n]


@lru_cache(maxsize=256)
def bootstrap_indices(n: int, k: int, n_bootstrap: int = N_BOOTSTRAP, seed: int = SEED) -> np.ndarray:
    """[n_bootstrap, k] draws from range(n) with replacement (read-only; the same for every prompt with n answers).
    A private RandomState seeded like verl's global `np.random.seed(seed); np.random.choice(...)` draws the same
    indices without touching the global RNG."""
    draws = np.random.RandomState(seed).choice(n, size=(n_bootstrap, k), replace=True)
    draws.setflags(write=False)
    return draws


def majority_values(values: np.ndarray, votes: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Per draw (row of `draws`): the value of the first answer whose vote is the most frequent in the draw; among
    equally frequent votes, the one drawn first wins (verl's `calc_maj_val`, a first-seen-order dict and `max`)."""
    drawn_votes = votes[draws]                                                   # [B, k] vote codes
    counts = (drawn_votes[:, :, None] == drawn_votes[:, None, :]).sum(-1)        # [B, k] each position's vote count
    first = np.argmax(counts == counts.max(axis=1, keepdims=True), axis=1)       # first position of a winning vote
    return values[draws[np.arange(len(draws)), first]]


def prompt_stats(values: Sequence[Any], votes: Sequence[Any] | None = None, *, n_bootstrap: int = N_BOOTSTRAP,
                 seed: int = SEED) -> dict[str, float]:
    """One prompt's statistics of one variable over its answers (None values dropped, as verl does)."""
    kept = [v for v in values if v is not None]
    if not kept:
        return {}
    x = np.asarray(kept, dtype=np.float64)
    n = len(x)
    out = {f"mean@{n}": float(np.mean(x))}
    if n == 1:
        return out
    out[f"std@{n}"] = float(np.std(x))
    # votes only when every kept answer has one (verl: a pred per value, none missing)
    codes = None
    if votes is not None and len(votes) == n and all(v is not None for v in votes):
        index: dict[Any, int] = {}
        codes = np.array([index.setdefault(v, len(index)) for v in votes])
    for k in subset_sizes(n):
        draws = bootstrap_indices(n, k, n_bootstrap, seed)
        drawn = x[draws]
        for name, stat in (("best", drawn.max(axis=1)), ("worst", drawn.min(axis=1))):
            out[f"{name}@{k}/mean"], out[f"{name}@{k}/std"] = float(np.mean(stat)), float(np.std(stat))
        if codes is not None:
            maj = majority_values(x, codes, draws)
            out[f"maj@{k}/mean"], out[f"maj@{k}/std"] = float(np.mean(maj)), float(np.std(maj))
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, bool, np.integer, np.floating, np.bool_))


def validation_stats(data_sources: Sequence[str], uids: Sequence[Any], columns: dict[str, Sequence[Any]], *,
                     n_bootstrap: int = N_BOOTSTRAP, seed: int = SEED) -> dict[str, dict[str, dict[str, float]]]:
    """{data source: {variable: {statistic: value averaged over prompts}}} — the shape of verl's
    `process_validation_metrics`. `uids` groups the answers of one prompt; `columns` holds one value per answer
    for each variable; a `pred` column is also the vote of maj@k; columns that are not numbers are skipped."""
    rows: dict[str, dict[Any, list[int]]] = defaultdict(lambda: defaultdict(list))
    for row, (source, uid) in enumerate(zip(data_sources, uids, strict=True)):
        rows[str(source)][uid].append(row)
    votes = columns.get("pred")
    per_prompt: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for source, groups in rows.items():
        for group in groups.values():
            for name, column in columns.items():
                values = [column[r] for r in group]
                if not all(_is_number(v) for v in values if v is not None):  # e.g. text columns, a text `pred`
                    continue
                prompt_votes = [votes[r] for r in group] if votes is not None else None
                for stat, value in prompt_stats(values, prompt_votes, n_bootstrap=n_bootstrap, seed=seed).items():
                    per_prompt[source][name][stat].append(value)
    return {source: {name: {stat: float(np.mean(v)) for stat, v in stats.items()} for name, stats in variables.items()}
            for source, variables in per_prompt.items()}


def flat_validation_metrics(stats: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    """verl's names: val-core for the core variable's mean/maj/best at the largest N, val-aux for the rest."""
    out: dict[str, float] = {}
    for source, variables in stats.items():
        core = "acc" if "acc" in variables else "reward"
        for name, values in variables.items():
            n_max = max(int(stat.split("@")[-1].split("/")[0]) for stat in values)
            for stat, value in values.items():
                is_core = (name == core and stat.split("@")[0] in ("mean", "maj", "best")
                           and stat.split("@")[1].split("/")[0] == str(n_max))
                out[f"{metric_names.VAL_CORE_PREFIX if is_core else 'val-aux/'}{source}/{name}/{stat}"] = value
    return out


def validation_metrics(data_sources: Sequence[str], uids: Sequence[Any], scores: Sequence[float],
                       extra: dict[str, Sequence[Any]] | None = None) -> dict[str, float]:
    """The flat validation metrics of one validation pass: `scores` is each answer's reward, `extra` the reward
    function's other columns (`acc`, `pred`, …)."""
    columns: dict[str, Sequence[Any]] = {"reward": list(scores)}
    for name, column in (extra or {}).items():
        if name != "reward":  # verl: the summed score is `reward`; a column of that name would be overwritten
            columns[name] = list(column)
    return flat_validation_metrics(validation_stats(data_sources, uids, columns))
