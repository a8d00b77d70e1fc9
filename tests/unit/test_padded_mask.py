"""The padded path leaves no query row without a key to attend to.

A left-padding query under the causal padding mask sees nothing. CUDA's memory-efficient SDPA backward turns
such a row into NaN gradients for every parameter, even though the row's output is never used; on the CPU
SDPA returns zeros there, so these tests use a plain-softmax attention function that fails the same way."""
from __future__ import annotations


import pytest
import torch
from transformers import AttentionInterface, AutoModelForCausalLM
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from engine.workers.forward import padded_attention_mask, response_log_probs, response_logits
from tests.unit.test_packing import PROMPT, grads, load_critic, make_batch

NAIVE = "rlstudio_test_plain_softmax"


def plain_softmax_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """softmax(q·k + mask) v with -inf at masked keys: an all-masked query row is NaN, forward and backward."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    scores = query @ key.transpose(-1, -2) * (scaling if scaling is not None else query.shape[-1] ** -0.5)
    if attention_mask is None:
        n = query.shape[-2]
        attention_mask = torch.ones(n, n, dtype=torch.bool, device=query.device).tril()
    scores = scores.masked_fill(~attention_mask, float("-inf"))
    return (scores.softmax(-1) @ value).transpose(1, 2).contiguous(), None


@pytest.fixture(scope="module")
def plain_lm(tiny_dir):
    AttentionInterface.register(NAIVE, plain_softmax_attention)
    AttentionMaskInterface.register(NAIVE, sdpa_mask)
    return AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation=NAIVE, dtype=torch.float32)


def test_mask_gives_every_query_a_key_and_valid_queries_their_usual_keys():
    am = make_batch()["attention_mask"]
    mask = padded_attention_mask(am)
    n, length = am.shape
    assert mask.shape == (n, 1, length, length) and mask.dtype == torch.bool
    assert mask.any(-1).all(), "a query row with nothing to attend to"
    valid = am.bool()
    usual = torch.ones(length, length, dtype=torch.bool).tril()[None] & valid[:, None, :]
    # valid queries: exactly causal over valid keys; padding queries: those and themselves (left padding:
    # themselves only)
    assert torch.equal(mask[:, 0][valid], usual[valid])
    eye = torch.eye(length, dtype=torch.bool)
    assert torch.equal(mask[:, 0][~valid], (usual | eye)[~valid])
    pad = PROMPT - 1  # row 3: a one-token prompt after PROMPT - 1 padding columns
    assert torch.equal(mask[3, 0, :pad], eye[:pad])
    # no padding at all: the 2D mask goes through untouched (SDPA runs plain causal)
    full = torch.ones(2, 5, dtype=torch.long)
    assert padded_attention_mask(full) is full


def test_plain_softmax_attention_has_finite_gradients_on_ragged_batches(plain_lm, lm_sdpa):
    b = make_batch()
    valid = b["response_mask"].bool()
    assert (b["attention_mask"][:, :PROMPT] == 0).any(), "the batch must have left padding"

    # negative control: transformers' own mask from the 2D attention mask leaves padding queries empty
    keep = torch.arange(b["input_ids"].shape[1] - b["responses"].shape[1] - 1, b["input_ids"].shape[1] - 1)
    logits = plain_lm(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"],
                      logits_to_keep=keep).logits
    torch.log_softmax(logits[valid], -1).sum().backward()
    nonfinite = [n for n, g in grads(plain_lm).items() if not g.isfinite().all()]
    assert nonfinite, "the 2D mask was expected to leave padding query rows empty (NaN under a plain softmax)"

    # the engine's padded path: finite, and equal to SDPA's padded and to the packed path
    results = {}
    for name, model, packed in (("plain", plain_lm, False), ("sdpa", lm_sdpa, False), ("packed", lm_sdpa, True)):
        lp, _ = response_log_probs(model, b, 1.0, remove_padding=packed)
        (lp * valid).sum().backward()
        results[name] = (lp.detach()[valid], grads(model))
    for name, (lp, g) in results.items():
        assert lp.isfinite().all() and all(x.isfinite().all() for x in g.values()), name
    for name in ("sdpa", "packed"):
        torch.testing.assert_close(results["plain"][0], results[name][0], atol=1e-5, rtol=1e-5)
        for key, g in results[name][1].items():
            torch.testing.assert_close(results["plain"][1][key], g, atol=1e-5, rtol=1e-4, msg=key)


def test_padded_logits_unchanged_at_valid_positions(lm_sdpa):
    """SDPA zeroes empty rows on the CPU, so there the old 2D path was right: the new mask gives the same."""
    b = make_batch(seed=4)
    valid = b["response_mask"].bool()
    keep = torch.arange(b["input_ids"].shape[1] - b["responses"].shape[1] - 1, b["input_ids"].shape[1] - 1)
    with torch.no_grad():
        old = lm_sdpa(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"],
                      logits_to_keep=keep).logits
        new = response_logits(lm_sdpa, b)
    torch.testing.assert_close(new[valid], old[valid], atol=1e-5, rtol=1e-5)


def test_critic_padded_values_have_finite_gradients(tiny_dir):
    from engine.workers.forward import response_values

    critic = load_critic(tiny_dir)
    b = make_batch(seed=7)
    results = []
    for packed in (False, True):
        values = response_values(critic, b, remove_padding=packed)
        (values ** 2).sum().backward()
        results.append((values.detach(), grads(critic)))
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-5, rtol=1e-5)
    for key, g in results[0][1].items():
        assert g.isfinite().all(), key
        torch.testing.assert_close(g, results[1][1][key], atol=1e-5, rtol=1e-4, msg=key)


@pytest.fixture(scope="module")
def lm_sdpa(tiny_dir):
    from engine.workers import packing

    packing.register()
    return AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation=packing.ATTN_NAME, dtype=torch.float32)
