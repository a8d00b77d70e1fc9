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


def test_dapo_reward_manager_as_verl(tokenizer):  # noqa: F811
    """The same responses through verl 0.9.1's DAPORewardManager and ours: equal token-level rewards and columns."""
    pytest.importorskip("verl.workers.reward_manager.dapo",
                        reason="verl==0.9.1 (the reference) is not installed: run scripts/setup.sh")
    import numpy as np
    from verl import DataProto
    from verl.workers.reward_manager.dapo import DAPORewardManager

    from engine.reward.default import default_compute_score

    texts = ["#### 72", "The answer is #### 72", "#### 71 step by step because", "The answer is 72",
             "step by step #### 72 because 0123456789", ""]
    batch, lengths = make_batch(tokenizer, texts, ["gsm8k"] * len(texts), ["72"] * len(texts), eos=False)
    width = batch["responses"].shape[1]
    prompts = torch.full((len(texts), 3), tokenizer.pad_token_id)
    attention = torch.cat([torch.ones(len(texts), 3, dtype=torch.long), batch["response_mask"]], dim=1)
    buffer = SimpleNamespace(enable=True, len=4, penalty_factor=0.7, log=True)
    max_len = max(lengths) + 1
    data = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": batch["responses"], "attention_mask": attention},
        non_tensors={"data_source": np.array(["gsm8k"] * len(texts), dtype=object),
                     "reward_model": np.array([{"ground_truth": "72"}] * len(texts), dtype=object),
                     "extra_info": np.array([{} for _ in texts], dtype=object)})
    theirs = DAPORewardManager(tokenizer, num_examine=0, compute_score=default_compute_score,
                               max_resp_len=max_len, overlong_buffer_cfg=buffer)(data, return_dict=True)
    ours = RewardManager(tokenizer, overlong_buffer=buffer, max_resp_len=max_len)(batch)
    nonempty = [i for i, n in enumerate(lengths) if n > 0]  # verl writes an empty response's reward at index -1
    torch.testing.assert_close(ours.token_level_scores[nonempty], theirs["reward_tensor"][nonempty], atol=1e-6,
                               rtol=0)
    assert width == theirs["reward_tensor"].shape[1]
    info = theirs["reward_extra_info"]
    assert ours.extra["acc"] == pytest.approx(info["acc"])
    assert ours.extra["overlong_reward"] == pytest.approx([float(x) for x in info["overlong_reward"]])
    assert ours.extra["overlong"] == [float(x) for x in info["overlong"]]
    assert any(x < 0 for x in ours.extra["overlong_reward"]) and any(x == 0 for x in ours.extra["overlong_reward"])
