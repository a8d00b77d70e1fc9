"""RewardModelScorer on a tiny, randomly initialised Qwen2 classifier saved locally."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.protocol import Batch
from engine.reward.reward_model import RewardModelScorer
from tests.unit.bpe_tokenizer import build_bpe_tokenizer


@pytest.fixture(scope="module")
def rm_path(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    path = tmp_path_factory.mktemp("rm")
    tok = build_bpe_tokenizer(path, "user assistant the answer is 42", vocab_size=300)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                         num_labels=1, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = Qwen2ForSequenceClassification(config)
    with torch.no_grad():  # random init of the head is tiny; make scores clearly distinct
        model.score.weight.normal_(0, 1.0)
    model.save_pretrained(path)
    return path


PROMPTS = ["<|im_start|>user\nwhat is 6*7?<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|>user\nsay something long please<|im_end|>\n<|im_start|>assistant\n"]
RESPONSES = ["the answer is 42<|im_end|>", "hello", "a b c d e f g h i j k l m n o p<|im_end|>"]


def manual_score(scorer, text: str, max_length: int | None = None, keep: str = "first") -> float:
    """The classifier head on the last token's hidden state, one unpadded sequence at a time."""
    ids = scorer.tokenizer(text, add_special_tokens=False)["input_ids"]
    if max_length is not None:
        ids = ids[:max_length] if keep == "first" else ids[-max_length:]
    with torch.no_grad():
        hidden = scorer.model.model(input_ids=torch.tensor([ids])).last_hidden_state
        return float(scorer.model.score(hidden[0, -1])[0])


def test_scores_match_manual_forward(rm_path):
    scorer = RewardModelScorer(str(rm_path), micro_batch_size=2)
    scores = scorer.score(PROMPTS, RESPONSES)
    assert len(scores) == 3
    expected = [manual_score(scorer, p + r) for p, r in zip(PROMPTS, RESPONSES)]
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-5)
    assert len({round(s, 4) for s in scores}) == 3  # padding did not collapse rows onto one position


def test_scores_are_deterministic(rm_path):
    a = RewardModelScorer(str(rm_path), micro_batch_size=3)
    b = RewardModelScorer(str(rm_path), micro_batch_size=1)
    first = a.score(PROMPTS, RESPONSES)
    assert a.score(PROMPTS, RESPONSES) == first
    np.testing.assert_allclose(b.score(PROMPTS, RESPONSES), first, rtol=1e-4, atol=1e-5)


def test_max_length_cuts_as_verl_or_as_asked(rm_path):
    text = PROMPTS[2] + RESPONSES[2]
    right = RewardModelScorer(str(rm_path), max_length=6)  # verl's default: keep the first tokens
    got = right.score_texts([text, PROMPTS[1] + RESPONSES[1]])
    np.testing.assert_allclose(got[0], manual_score(right, text, max_length=6), rtol=1e-4, atol=1e-5)
    left = RewardModelScorer(str(rm_path), max_length=6, truncation="left")
    np.testing.assert_allclose(left.score_texts([text])[0], manual_score(left, text, max_length=6, keep="last"),
                               rtol=1e-4, atol=1e-5)
    assert abs(got[0] - left.score_texts([text])[0]) > 1e-4
    with pytest.raises(ValueError, match="reward_model.max_length=6"):
        RewardModelScorer(str(rm_path), max_length=6, truncation="error").score_texts([text])


def test_call_on_batch_meta(rm_path):
    scorer = RewardModelScorer(str(rm_path))
    batch = Batch(meta={"prompt_text": PROMPTS})
    assert scorer(batch, RESPONSES) == scorer.score(PROMPTS, RESPONSES)
    with pytest.raises(ValueError, match="3 prompts but 2 responses"):
        scorer.score(PROMPTS, RESPONSES[:2])
