"""logprobs_and_entropy: one chunked pass with the temperature folded in, against the plain fp32 formulas and
values by hand, values and gradients, with either or both outputs in the loss."""
from __future__ import annotations

import math

import pytest
import torch

from engine.algos.logprob import logprobs_and_entropy


def reference(logits, labels, temperature):
    logp = torch.log_softmax(logits.double() / temperature, -1)
    return logp.gather(-1, labels[..., None]).squeeze(-1), -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_size", [1, 3, 512])
@pytest.mark.parametrize("use", ["both", "lp", "ent"])
def test_values_and_grads_match_reference(temperature, chunk_size, use):
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11) * 3
    labels = torch.randint(0, 11, (2, 5))
    w_lp, w_ent = torch.randn(2, 5), torch.randn(2, 5)

    def loss_of(lp, ent):
        return (lp * w_lp).sum() * (use != "ent") + (ent * w_ent).sum() * (use != "lp")

    mine_in = logits.clone().requires_grad_(True)
    lp, ent = logprobs_and_entropy(mine_in, labels, temperature, calc_entropy=True, chunk_size=chunk_size)
    loss_of(lp, ent).backward()
    ref_in = logits.double().clone().requires_grad_(True)
    rlp, rent = reference(ref_in, labels, temperature)
    loss_of(rlp, rent).backward()
    torch.testing.assert_close(lp.double(), rlp.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent.double(), rent.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mine_in.grad.double(), ref_in.grad, atol=1e-5, rtol=1e-5)


def test_without_entropy_and_bf16():
    torch.manual_seed(1)
    logits = (torch.randn(3, 4, 50) * 2).bfloat16().requires_grad_(True)
    labels = torch.randint(0, 50, (3, 4))
    lp, ent = logprobs_and_entropy(logits, labels, calc_entropy=False, chunk_size=5)
    assert ent is None and lp.dtype == torch.float32
    lp.sum().backward()
    assert logits.grad.dtype == torch.bfloat16
    torch.testing.assert_close(lp.double(), reference(logits.detach().float(), labels, 1.0)[0], atol=1e-4, rtol=1e-4)


def test_masked_vocabulary_stays_finite():
    logits = torch.tensor([[0.0, float("-inf"), 1.0]], requires_grad=True)
    lp, ent = logprobs_and_entropy(logits, torch.tensor([0]))
    (lp.sum() + ent.sum()).backward()
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all() and torch.isfinite(logits.grad).all()


def test_uniform_logits_by_hand():
    # uniform over 4 tokens: log p = -ln 4, entropy = ln 4 (at any temperature)
    lp, ent = logprobs_and_entropy(torch.zeros(1, 2, 4), torch.tensor([[0, 3]]), temperature=0.5)
    torch.testing.assert_close(lp, torch.full((1, 2), -math.log(4.0)))
    torch.testing.assert_close(ent, torch.full((1, 2), math.log(4.0)))


def test_gradcheck_float64():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 2, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    labels = torch.randint(0, 5, (3, 2), generator=gen)
    # fp32 outputs limit precision, so compare analytical vs numerical gradients loosely
    for pick in (0, 1):
        assert torch.autograd.gradcheck(
            lambda x, pick=pick: logprobs_and_entropy(x, labels, 0.8, chunk_size=2)[pick].double(), (logits,), eps=1e-3,
            atol=1e-3, rtol=1e-3)


def test_bad_shapes_and_temperature():
    with pytest.raises(ValueError, match="labels shape"):
        logprobs_and_entropy(torch.zeros(2, 3, 4), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        logprobs_and_entropy(torch.zeros(2, 4), torch.zeros(2, dtype=torch.long), temperature=0)
