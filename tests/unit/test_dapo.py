"""DAPO's pieces: dynamic sampling's group filter, the overlong penalty and the dapo reward manager, by hand."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine.algos.dynamic_sampling import rows_with_signal
from engine.reward import RewardManager
from engine.reward.overlong import overlong_penalty
from tests.unit.test_reward_manager import make_batch, tokenizer  # noqa: F401 - the shared tokenizer fixture


def test_rows_with_signal_drops_groups_that_all_score_the_same():
    # groups a (1, 0): kept; b (1, 1): dropped; c (5): a single sample, kept (as verl)
    rows, kept, seen = rows_with_signal(torch.tensor([1.0, 0.0, 1.0, 1.0, 5.0]), ["a", "a", "b", "b", "c"])
    assert (rows, kept, seen) == ([0, 1, 4], 2, 3)
    rows, kept, seen = rows_with_signal(torch.tensor([0.0, 0.0, 1.0, 1.0]), ["a", "a", "b", "b"])
    assert (rows, kept, seen) == ([], 0, 2)


@pytest.mark.parametrize("length, expected", [
    (10, 0.0),  # well before the buffer
    (16, 0.0),  # at its start: max_resp_len - len = 20 - 4
    (18, -0.5),  # half-way: -(18 - 16) / 4 * 1.0
    (20, -1.0),  # at the cap: -penalty_factor
])
def test_overlong_penalty(length, expected):
    assert overlong_penalty(length, max_resp_len=20, buffer_len=4, penalty_factor=1.0) == pytest.approx(expected,
                                                                                                        abs=1e-6)
    assert overlong_penalty(length, 20, 4, 0.5) == pytest.approx(expected / 2, abs=1e-6)
    with pytest.raises(ValueError, match="overlong_buffer_cfg.len"):
        overlong_penalty(length, 20, 0, 1.0)


def test_dapo_reward_manager_adds_the_penalty_and_keeps_acc(tokenizer):  # noqa: F811
    batch, lengths = make_batch(tokenizer, ["#### 72", "The answer is #### 72 because step by step"],
                                ["gsm8k", "gsm8k"], ["72", "72"])
    short, long = lengths
    buffer = SimpleNamespace(enable=True, len=long - short, penalty_factor=1.0, log=True)
    manager = RewardManager(tokenizer, overlong_buffer=buffer, max_resp_len=long)
    res = manager(batch)
    # the short answer ends where the buffer starts (no penalty); the long one at the cap (-1)
    assert res.scores == pytest.approx([1.0, 0.0], abs=1e-6)
    assert res.extra["acc"] == [1.0, 1.0]
    assert res.extra["overlong_reward"] == pytest.approx([0.0, -1.0], abs=1e-6)
    assert res.extra["overlong"] == [0.0, 1.0]
    assert res.token_level_scores.sum(-1).tolist() == pytest.approx([1.0, 0.0], abs=1e-6)
    with pytest.raises(ValueError, match="max_resp_len"):
        RewardManager(tokenizer, overlong_buffer=buffer, max_resp_len=None)
    sub = res.select([1])
    assert sub.scores == pytest.approx([0.0]) and sub.extra["acc"] == [1.0]
