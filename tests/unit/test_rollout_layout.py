"""The rollout's output layout: [left-padded prompt | right-padded response], mask through the first end token."""
from __future__ import annotations

import torch

from engine.protocol import Batch
from engine.rollout.hf_rollout import assemble, response_mask_from

EOS, PAD = 9, 0


def test_mask_covers_tokens_through_first_eos():
    responses = torch.tensor([[5, 6, EOS, 7, 7], [5, EOS, EOS, 0, 0], [5, 6, 7, 8, 4]])
    assert response_mask_from(responses, [EOS]).tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]


def test_assemble_joins_prompt_and_response():
    prompts = Batch({"input_ids": torch.tensor([[PAD, 3, 4], [2, 3, 4]]),
                     "attention_mask": torch.tensor([[0, 1, 1], [1, 1, 1]]),
                     "position_ids": torch.tensor([[0, 0, 1], [0, 1, 2]])}, {"uid": ["a", "b"]})
    out = assemble(prompts, torch.tensor([[5, EOS, 7], [6, 6, 6]]), [EOS], PAD)
    assert out["responses"].tolist() == [[5, EOS, PAD], [6, 6, 6]]  # tokens after the end token are padding
    assert out["input_ids"].tolist() == [[PAD, 3, 4, 5, EOS, PAD], [2, 3, 4, 6, 6, 6]]
    assert out["attention_mask"].tolist() == [[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]
    assert out["position_ids"].tolist() == [[0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5]]
    assert out["response_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert list(out["uid"]) == ["a", "b"]
