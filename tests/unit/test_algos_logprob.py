"""Chunked log-probs and entropies equal the naive full-softmax versions, values and gradients."""

import math

import pytest
import torch

from engine.algos.logprob import entropy_from_logits, logprobs_from_logits


def _naive_logprobs(logits, labels):
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[..., None]).squeeze(-1)


def _naive_entropy(logits):
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


@pytest.fixture
def inputs():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=gen) * 3
    labels = torch.randint(0, 11, (2, 5), generator=gen)
    upstream = torch.randn(2, 5, generator=gen)
    return logits, labels, upstream


def test_uniform_logits_by_hand():
    logits = torch.zeros(1, 2, 4)
    labels = torch.tensor([[0, 3]])
    # uniform over 4 tokens: log p = -ln 4, entropy = ln 4
    torch.testing.assert_close(logprobs_from_logits(logits, labels), torch.full((1, 2), -math.log(4.0)))
    torch.testing.assert_close(entropy_from_logits(logits), torch.full((1, 2), math.log(4.0)))


@pytest.mark.parametrize("chunk_size", [1, 3, 64])
def test_logprobs_match_naive(inputs, chunk_size):
    logits, labels, upstream = inputs
    mine_in = logits.clone().requires_grad_(True)
    ref_in = logits.clone().requires_grad_(True)
    mine = logprobs_from_logits(mine_in, labels, chunk_size=chunk_size)
    ref = _naive_logprobs(ref_in, labels)
    assert mine.dtype == torch.float32 and mine.shape == (2, 5)
    torch.testing.assert_close(mine, ref, rtol=1e-5, atol=1e-5)
    (mine * upstream).sum().backward()
    (ref * upstream).sum().backward()
    torch.testing.assert_close(mine_in.grad, ref_in.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk_size", [1, 3, 64])
def test_entropy_matches_naive(inputs, chunk_size):
    logits, _, upstream = inputs
    mine_in = logits.clone().requires_grad_(True)
    ref_in = logits.clone().requires_grad_(True)
    mine = entropy_from_logits(mine_in, chunk_size=chunk_size)
    ref = _naive_entropy(ref_in)
    assert mine.dtype == torch.float32 and mine.shape == (2, 5)
    torch.testing.assert_close(mine, ref, rtol=1e-5, atol=1e-5)
    (mine * upstream).sum().backward()
    (ref * upstream).sum().backward()
    torch.testing.assert_close(mine_in.grad, ref_in.grad, rtol=1e-5, atol=1e-5)


def test_gradcheck_float64():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 2, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    labels = torch.randint(0, 5, (3, 2), generator=gen)
    # fp32 outputs limit precision, so compare analytical vs numerical gradients loosely
    assert torch.autograd.gradcheck(
        lambda x: logprobs_from_logits(x, labels, chunk_size=2).double(), (logits,), eps=1e-3, atol=1e-3, rtol=1e-3
    )
    assert torch.autograd.gradcheck(
        lambda x: entropy_from_logits(x, chunk_size=2).double(), (logits,), eps=1e-3, atol=1e-3, rtol=1e-3
    )


def test_bf16_logits_give_fp32_outputs_and_bf16_grads(inputs):
    logits, labels, _ = inputs
    low = logits.to(torch.bfloat16).requires_grad_(True)
    logp = logprobs_from_logits(low, labels, chunk_size=4)
    ent = entropy_from_logits(low, chunk_size=4)
    assert logp.dtype == ent.dtype == torch.float32
    torch.testing.assert_close(logp, _naive_logprobs(low.detach(), labels), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, _naive_entropy(low.detach()), rtol=1e-5, atol=1e-5)
    (logp.sum() + ent.sum()).backward()
    assert low.grad.dtype == torch.bfloat16


def test_masked_vocabulary_entries_do_not_give_nan():
    logits = torch.tensor([[[0.0, 0.0, -math.inf]]], requires_grad=True)
    ent = entropy_from_logits(logits)
    torch.testing.assert_close(ent, torch.tensor([[math.log(2.0)]]))
    ent.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_label_shape_mismatch():
    with pytest.raises(ValueError, match="labels shape"):
        logprobs_from_logits(torch.zeros(2, 3, 4), torch.zeros(2, 2, dtype=torch.long))
