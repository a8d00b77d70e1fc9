"""Micro-batching of the actor/critic/reference passes: token-budget partition (use_dynamic_bsz), padding
trimmed per micro-batch, outputs put back in row order and at the full response width."""
from __future__ import annotations

import torch

from engine.protocol import Batch
from engine.workers.forward import micro_batches, pad_to, token_budget_partition, trim_padding, unpermute


def make_batch(prompt_lens, response_lens, prompt=6, resp=5):
    n = len(prompt_lens)
    am = torch.zeros(n, prompt + resp, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_lens, response_lens)):
        am[i, prompt - p:prompt] = 1
        am[i, prompt:prompt + r] = 1
    ids = torch.arange(n * (prompt + resp)).view(n, -1) * am
    return Batch({"input_ids": ids, "attention_mask": am, "position_ids": (am.cumsum(-1) - 1).clamp(min=0),
                  "responses": ids[:, prompt:], "response_mask": am[:, prompt:],
                  "advantages": torch.randn(n, resp), "row": torch.arange(n)})


def test_partition_respects_budget_and_covers_rows():
    p, r = [5, 1, 3, 2, 6, 1], [4, 1, 2, 5, 1, 1]
    groups = token_budget_partition(p, r, max_tokens=16)
    assert sorted(i for g in groups for i in g) == list(range(6))
    for g in groups:
        assert len(g) == 1 or len(g) * (max(p[i] for i in g) + max(r[i] for i in g)) <= 16


def test_partition_oversized_row_alone():
    assert token_budget_partition([10, 1], [10, 1], max_tokens=8) == [[0], [1]]


def test_partition_fixed_lengths_gives_budget_over_length_rows():
    groups = token_budget_partition([4] * 10, [4] * 10, max_tokens=32)
    assert [len(g) for g in groups] == [4, 4, 2]


def test_trim_padding_drops_common_pad_columns():
    b = make_batch([2, 3], [1, 4])
    t = trim_padding(b)
    assert t["input_ids"].shape == (2, 3 + 4) and t["responses"].shape == (2, 4)
    assert t["advantages"].shape == (2, 4)
    assert torch.equal(t["attention_mask"].sum(-1), b["attention_mask"].sum(-1))  # no valid token lost
    assert torch.equal(t["input_ids"][t["attention_mask"].bool()], b["input_ids"][b["attention_mask"].bool()])


def test_micro_batches_round_trip_order_and_width():
    b = make_batch([5, 1, 3, 2, 6, 1], [4, 1, 2, 5, 1, 1])
    for max_tokens in (None, 12, 100):
        mbs, order = micro_batches(b, 2, max_tokens)
        assert sum(len(mb) for mb in mbs) == len(b)
        # a per-row, per-response-token output computed on the micro-batches, put back together
        out = torch.cat([pad_to(mb["responses"].float() * mb["response_mask"], 5) for mb in mbs])
        out = unpermute(out, order)
        assert torch.equal(out, (b["responses"] * b["response_mask"]).float())
        if max_tokens:
            for mb in mbs:
                assert len(mb) == 1 or mb["input_ids"].numel() <= max_tokens
