"""trainer.balance_batch: reorder a step's sequences so every data-parallel worker gets about the same
number of tokens (the slowest worker sets the pace of each call)."""
from __future__ import annotations

import heapq

import torch


def balanced_order(lengths: list[int], world: int) -> list[int]:
    """Row order such that consecutive equal-size chunks (Batch.chunk) have near-equal length sums.

    Greedy: longest first, each to the lightest partition that still has room (partitions must keep
    the sizes Batch.chunk will cut: they differ by at most one row).
    """
    n = len(lengths)
    sizes = [n * (i + 1) // world - n * i // world for i in range(world)]
    parts: list[list[int]] = [[] for _ in range(world)]
    heap = [(0, i) for i in range(world)]
    for idx in sorted(range(n), key=lambda i: -lengths[i]):
        skipped = []
        while True:
            load, p = heapq.heappop(heap)
            if len(parts[p]) < sizes[p]:
                break
            skipped.append((load, p))
        parts[p].append(idx)
        heapq.heappush(heap, (load + lengths[idx], p))
        for item in skipped:
            heapq.heappush(heap, item)
    return [i for part in parts for i in part]


def balance(batch, world: int):
    if world <= 1:
        return batch
    lengths = batch["attention_mask"].sum(-1).tolist()
    return batch.index(torch.tensor(balanced_order(lengths, world)))
