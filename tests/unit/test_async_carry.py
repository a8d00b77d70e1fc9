"""Carry-over's bookkeeping (engine/trainer/asynchronous/carry.py), driven by a scripted generator whose answers
have planned lengths: each prompt is [marker, planned length] and every chunk appends tokens until the answer has
that many (then ends). A planted slow answer (a long plan) is carried, then dropped (counted, refilled) or waited for.
The engine-level runs with the real model are in tests/integration/test_async_carry.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.protocol import Batch
from engine.trainer.asynchronous.carry import CarryPool, assemble_groups, continuation, new_group, run_round

PAD, TOKEN, LENGTH, N = 0, 7, 32, 2


def prompt_rows(order: int, plan: int, width: int = 3) -> Batch:
    """A group of N rows of one prompt [marker, plan], left-padded to `width`."""
    ids = torch.tensor([[PAD] * (width - 2) + [100 + order, plan]] * N)
    mask = (ids != PAD).long()
    return Batch({"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)},
                 {"uid": np.array([f"g{order}"] * N, dtype=object)})


def scripted(chunk_log: list):
    """The generator: reads each row's plan and answer so far from the continuation; log-prob -0.5 per token; an
    answer ends when it has its planned length (also exactly at a chunk's end)."""
    def generate(batch: Batch, max_new: int) -> Batch:
        chunk_log.append(batch)
        counts, ended = [], []
        for ids, mask in zip(batch["input_ids"], batch["attention_mask"]):
            real = ids[mask.bool()]
            plan, so_far = int(real[1]), len(real) - 2
            counts.append(min(max_new, plan - so_far))
            ended.append(so_far + counts[-1] >= plan)
        counts = torch.tensor(counts)
        mask = (torch.arange(max_new).unsqueeze(0) < counts.unsqueeze(1)).long()
        return Batch({"responses": torch.where(mask.bool(), TOKEN, PAD), "rollout_log_probs": -0.5 * mask.float(),
                      "response_mask": mask, "ended": torch.tensor(ended)})
    return generate


def pool_with(plans: list[int], b: int, extra: int, threshold: int = 8, strategy: str = "drop") -> CarryPool:
    pool = CarryPool(b, extra, threshold, strategy)
    for order, plan in enumerate(plans):
        pool.add(new_group(order, prompt_rows(order, plan), (0, order), LENGTH, PAD))
    return pool


def test_continuation_appends_the_answer_so_far_and_left_pads():
    pool = pool_with([5, 5], 1, 1)
    g = pool.groups[0]
    g.tokens[0, :3] = torch.tensor([9, 8, 7])
    g.lengths[0] = 3
    out = continuation([(g, 0), (g, 1)], PAD)
    assert out["input_ids"].tolist() == [[100, 5, 9, 8, 7], [PAD, PAD, PAD, 100, 5]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [0, 0, 0, 1, 1]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3, 4], [0, 0, 0, 0, 1]]


def test_the_batch_is_the_first_groups_to_complete_and_the_rest_carry_on_newer_weights():
    """B = 2 of 3 in flight, chunks of 2: the answers of 3 and 4 tokens complete in two chunks, the 9-token one is
    carried with its 4 tokens of version 0 and continues on version 1 in the next round, and is carried again."""
    pool = pool_with([9, 3, 4], b=2, extra=1)
    calls: list = []
    assert run_round(pool, step=1, version=0, chunk=2, generate=scripted(calls), pad_id=PAD, round_index=0) == 2
    taken = pool.take(1)
    assert [g.order for g in taken] == [1, 2]
    assert [g.lengths.tolist() for g in taken] == [[3, 3], [4, 4]]
    (slow,) = pool.groups
    assert slow.lengths.tolist() == [4, 4] and not slow.complete and slow.first_version == 0
    prompts, responses, mask = assemble_groups(taken, PAD)
    assert responses.shape == (4, LENGTH) and mask.sum(-1).tolist() == [3, 3, 4, 4]
    assert list(prompts.meta["uid"]) == ["g1", "g1", "g2", "g2"]
    # next round: one new group refills the pool; the slow one continues from its 4 tokens on version 1
    assert pool.wanted(2) == 2
    pool.add(new_group(3, prompt_rows(3, 2), (0, 3), LENGTH, PAD))
    pool.add(new_group(4, prompt_rows(4, 2), (0, 4), LENGTH, PAD))
    run_round(pool, step=2, version=1, chunk=2, generate=scripted(calls), pad_id=PAD, round_index=1)
    assert calls[2]["input_ids"].shape[1] == 2 + 4  # the carried rows: prompt + 4 tokens so far
    taken = pool.take(2)
    assert [g.order for g in taken] == [3, 4]  # they completed first (chunk 0 of round 1)
    assert pool.groups == [slow] and not slow.complete  # carried again
    assert slow.lengths.tolist() == [6, 6]
    assert slow.versions[0, :6].tolist() == [0, 0, 0, 0, 1, 1]  # each token's version: the round's weights
    assert slow.log_probs[0, :6].tolist() == [-0.5] * 6
    assert slow.age(3) == 3


def test_drop_evicts_a_planted_slow_group_past_the_threshold_and_one_prompt_refills_it():
    pool = pool_with([30, 2, 2], b=2, extra=1, threshold=2, strategy="drop")
    calls: list = []
    run_round(pool, 1, 0, 2, scripted(calls), PAD, 0)
    assert [g.order for g in pool.take(1)] == [1, 2]
    assert pool.evict_stale(2) == []  # age 2 at step 2: at the threshold, kept
    for order in (3, 4):
        pool.add(new_group(order, prompt_rows(order, 2), (0, order), LENGTH, PAD))
    run_round(pool, 2, 1, 2, scripted(calls), PAD, 1)
    assert [g.order for g in pool.take(2)] == [3, 4]
    (slow,) = pool.groups
    evicted = pool.evict_stale(3)  # age 3 > 2
    assert evicted == [slow] and pool.groups == []
    assert pool.wanted(3) == 3  # B + extra again: each evicted group refilled by one prompt


def test_wait_finishes_a_planted_slow_group_before_it_passes_the_threshold_and_trains_it_first():
    pool = pool_with([12, 2, 2], b=2, extra=1, threshold=2, strategy="wait")
    calls: list = []
    run_round(pool, 1, 0, 2, scripted(calls), PAD, 0)
    assert [g.order for g in pool.take(1)] == [1, 2]
    slow = pool.groups[0]
    assert pool.evict_stale(2) == []  # wait never evicts
    assert pool.must_finish(2) == [slow]  # at step 3 its age would be 3 > 2
    assert pool.wanted(2) == 1  # sampling blocks beyond the batch's B while it is pending
    pool.add(new_group(3, prompt_rows(3, 2), (0, 3), LENGTH, PAD))
    chunks = run_round(pool, 2, 1, 2, scripted(calls), PAD, 1)
    assert chunks == 5 and slow.complete  # the round went on until the slow group finished (its last 10 tokens)
    taken = pool.take(2)
    assert taken[0] is slow and [g.order for g in taken] == [0, 3]
    assert slow.age(2) == 2  # trained at the threshold, never past it


def test_sources_list_the_prompts_in_flight_in_pull_order():
    pool = pool_with([5, 5, 5], b=1, extra=2)
    pool.groups.reverse()
    assert pool.sources() == [(0, 0), (0, 1), (0, 2)]


@pytest.mark.parametrize("strategy", ["drop", "wait"])
def test_an_answer_at_the_response_length_ends_there(strategy):
    pool = pool_with([LENGTH + 10, 1], b=2, extra=0, strategy=strategy)
    run_round(pool, 1, 0, 8, scripted([]), PAD, 0)
    assert [g.lengths.tolist() for g in pool.take(1)] == [[1, 1], [LENGTH, LENGTH]]  # first to complete first
