"""use_remove_padding: packed micro-batches (one row of valid tokens, attention inside each sequence) give the
padded path's log-probs, entropy, values and gradients; the attention function is plain SDPA otherwise."""
from __future__ import annotations

import pytest
import torch
from transformers import (AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification, BloomConfig, BloomForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from engine.protocol import Batch
from engine.workers import packing
from engine.workers.forward import (batched_log_probs, batched_values, response_log_probs, response_values,
                                    token_budget_partition)

PROMPT, RESP = 7, 5
PROMPT_LENS, RESP_LENS = [7, 3, 5, 1, 4], [5, 2, 4, 1, 3]


@pytest.fixture(scope="module")
def lm(tiny_dir):
    packing.register()
    return AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation=packing.ATTN_NAME,
                                                dtype=torch.float32)


def make_batch(prompt_lens=PROMPT_LENS, resp_lens=RESP_LENS, vocab=60, seed=0, prompt=PROMPT, resp=RESP) -> Batch:
    """[left-padded prompt | right-padded response] rows of different lengths, as the rollout lays them out."""
    g = torch.Generator().manual_seed(seed)
    n = len(prompt_lens)
    am = torch.zeros(n, prompt + resp, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_lens, resp_lens)):
        am[i, prompt - p:prompt] = 1
        am[i, prompt:prompt + r] = 1
    ids = torch.randint(3, vocab, (n, prompt + resp), generator=g) * am
    return Batch({"input_ids": ids, "attention_mask": am, "position_ids": (am.cumsum(-1) - 1).clamp(min=0),
                  "responses": ids[:, prompt:], "response_mask": am[:, prompt:]})


def load_critic(tiny_dir):
    """A value model as the worker builds it: the tiny LM with a (seeded) one-output token head."""
    packing.register()
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(tiny_dir, num_labels=1)
    config.classifier_dropout = 0.0  # assigned as the worker does (a from_pretrained keyword is dropped: p=0.1)
    return AutoModelForTokenClassification.from_pretrained(tiny_dir, config=config, dtype=torch.float32,
                                                           attn_implementation=packing.ATTN_NAME)


def grads(model) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


def assert_grads_close(a: dict, b: dict, atol=1e-5):
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=1e-4, msg=name)


# ---- packing helpers ---------------------------------------------------------------------------------------
def test_packed_inputs_and_response_sources():
    b = make_batch()
    am = b["attention_mask"]
    inputs = packing.packed_inputs(b["input_ids"], am, b["position_ids"])
    lens = am.sum(-1)
    assert inputs["input_ids"].shape == (1, int(lens.sum()))
    assert inputs["cu_seq_lens_q"].tolist() == [0] + lens.cumsum(0).tolist()
    assert inputs["max_length_q"] == int(lens.max())
    # position ids restart for every sequence
    starts = inputs["cu_seq_lens_q"][:-1].long()
    assert inputs["position_ids"][0, starts].tolist() == [0] * len(b)
    resp_valid, src = packing.response_sources(am, RESP)
    assert torch.equal(resp_valid, am[:, PROMPT:].bool())
    # the token before each valid response token is the prompt's last token or the previous response token
    packed = inputs["input_ids"][0]
    before = torch.cat([b["input_ids"][:, PROMPT - 1:PROMPT], b["responses"][:, :-1]], 1)
    assert torch.equal(packed[src], before[resp_valid])
    assert torch.equal(packed[src + 1], b["responses"][resp_valid])


def test_padded_varlen_matches_per_sequence_attention_with_gqa():
    g = torch.Generator().manual_seed(1)
    lens = [5, 1, 3, 7]
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(sum(lens), 4, 8, generator=g, requires_grad=True)
    k = torch.randn(sum(lens), 2, 8, generator=g, requires_grad=True)
    v = torch.randn(sum(lens), 2, 8, generator=g, requires_grad=True)
    out = packing.padded_varlen(q, k, v, cu, max(lens), 0.3)
    expect = []
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
        qs, ks, vs = (x[s:e].transpose(0, 1) for x in (q, k, v))
        ks, vs = ks.repeat_interleave(2, 0), vs.repeat_interleave(2, 0)
        expect.append(torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=0.3)
                      .transpose(0, 1))
    expect = torch.cat(expect)
    torch.testing.assert_close(out, expect, atol=1e-6, rtol=1e-5)
    w = torch.randn_like(out)
    got = torch.autograd.grad((out * w).sum(), (q, k, v))
    want = torch.autograd.grad((expect * w).sum(), (q, k, v))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_varlen_kwargs_across_torch_versions():
    assert packing._varlen_kwargs(frozenset({"window_size", "scale", "enable_gqa"}), 0.1, True) == {
        "window_size": (-1, 0), "scale": 0.1, "enable_gqa": True}
    assert packing._varlen_kwargs(frozenset({"is_causal", "scale"}), None, False) == {"is_causal": True}
    assert packing._varlen_kwargs(frozenset({"scale"}), None, False) is None


def test_cpu_never_takes_the_flash_path():
    x = torch.randn(4, 2, 8, dtype=torch.bfloat16)
    assert packing.flash_varlen(x, x, x, torch.tensor([0, 4], dtype=torch.int32), 4, None) is None


def test_without_cu_seqlens_it_is_sdpa():
    class Attn(torch.nn.Module):
        num_key_value_groups, is_causal, training = 2, True, False

    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(2, 4, 6, 8, generator=g), torch.randn(2, 2, 6, 8, generator=g), torch.randn(2, 2, 6, 8,
                                                                                                        generator=g)
    mask = torch.ones(2, 1, 6, 6, dtype=torch.bool).tril()
    mask[1, :, :, :2] = False  # left padding in row 1
    for m in (mask, None):
        got, _ = packing.varlen_attention(Attn(), q, k, v, m, scaling=0.2)
        want, _ = sdpa_attention_forward(Attn(), q, k, v, m, scaling=0.2)
        assert torch.equal(got, want)


# ---- the model: packed == padded ----------------------------------------------------------------------------
def test_model_with_packing_attention_generates_like_sdpa(tiny_dir, lm):
    sdpa = AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation="sdpa", dtype=torch.float32)
    b = make_batch()
    prompt = dict(input_ids=b["input_ids"][:, :PROMPT], attention_mask=b["attention_mask"][:, :PROMPT])
    torch.testing.assert_close(lm(**prompt).logits, sdpa(**prompt).logits, atol=0, rtol=0)
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(lm.generate(**prompt, **kw), sdpa.generate(**prompt, **kw))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_packed_log_probs_entropy_and_gradients_match_padded(lm, temperature):
    b = make_batch()
    mask = b["response_mask"].float()
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(3))
    results = {}
    for packed in (False, True):
        lp, ent = response_log_probs(lm, b, temperature, calc_entropy=True, remove_padding=packed)
        ((lp * weights * mask).sum() + (ent * mask).sum() * 0.1).backward()
        results[packed] = (lp.detach() * mask, ent.detach() * mask, grads(lm))
    torch.testing.assert_close(results[True][0], results[False][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(results[True][1], results[False][1], atol=1e-5, rtol=1e-5)
    assert_grads_close(results[True][2], results[False][2])
    # packed outputs are 0 at padding
    assert (results[True][0][mask == 0] == 0).all()


def test_packed_gqa_model_matches_padded():
    packing.register()
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, intermediate_size=96, max_position_embeddings=64)
    model = Qwen2ForCausalLM._from_config(config, attn_implementation=packing.ATTN_NAME, dtype=torch.float32)
    b = make_batch(seed=5)
    mask = b["response_mask"].float()
    outs = []
    for packed in (False, True):
        lp, ent = response_log_probs(model, b, 1.0, calc_entropy=True, remove_padding=packed)
        (lp * mask).sum().backward()
        outs.append((lp.detach() * mask, ent.detach() * mask, grads(model)))
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outs[1][1], outs[0][1], atol=1e-5, rtol=1e-5)
    assert_grads_close(outs[1][2], outs[0][2])


def test_packed_values_and_gradients_match_padded(tiny_dir):
    critic = load_critic(tiny_dir)
    b = make_batch(seed=7)
    returns = torch.randn(b["responses"].shape, generator=torch.Generator().manual_seed(8))
    outs = []
    for packed in (False, True):
        values = response_values(critic, b, remove_padding=packed)
        ((values - returns) ** 2 * b["response_mask"]).sum().backward()
        outs.append((values.detach(), grads(critic)))
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=1e-5, rtol=1e-5)
    assert_grads_close(outs[1][1], outs[0][1])


@pytest.mark.parametrize("max_tokens", [None, 20])
def test_batched_passes_with_micro_and_token_budget(lm, max_tokens):
    b = make_batch(PROMPT_LENS * 2, RESP_LENS[::-1] * 2, seed=9)
    mask = b["response_mask"].bool()
    lp0, ent0 = batched_log_probs(lm, b, 3, 0.8, calc_entropy=True, max_tokens=max_tokens)
    lp1, ent1 = batched_log_probs(lm, b, 3, 0.8, calc_entropy=True, max_tokens=max_tokens, remove_padding=True)
    torch.testing.assert_close(lp1[mask], lp0[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent1[mask], ent0[mask], atol=1e-5, rtol=1e-5)


def test_batched_values_with_token_budget(tiny_dir):
    critic = load_critic(tiny_dir)
    b = make_batch(PROMPT_LENS * 2, RESP_LENS * 2, seed=10)
    v0 = batched_values(critic, b, 4, max_tokens=24)
    v1 = batched_values(critic, b, 4, max_tokens=24, remove_padding=True)
    torch.testing.assert_close(v1, v0, atol=1e-5, rtol=1e-5)


def test_packed_token_budget_counts_valid_tokens_only():
    p, r = [6, 1, 1, 1], [4, 1, 1, 1]
    # padded, a group costs rows × longest row: the long row keeps company with nobody under a 12 budget
    assert token_budget_partition(p, r, 12) == [[0], [1, 2, 3]]
    # packed, it costs the sum of lengths: 10 + 2 fits
    assert token_budget_partition(p, r, 12, packed=True) == [[0, 1], [2, 3]]
    groups = token_budget_partition([5, 3, 2, 7, 1], [2, 4, 1, 3, 1], 11, packed=True)
    assert sorted(i for g in groups for i in g) == list(range(5))
    for g in groups:
        assert len(g) == 1 or sum([5, 3, 2, 7, 1][i] + [2, 4, 1, 3, 1][i] for i in g) <= 11


# ---- where packing cannot work: a clear error ---------------------------------------------------------------
def test_models_that_cannot_pack_are_refused():
    key = "critic.model.use_remove_padding"
    with pytest.raises(ValueError, match=rf"{key}=True.*BloomForCausalLM.*set {key}=False"):
        packing.check_packable(BloomForCausalLM, BloomConfig(), key)
    sliding = Qwen2Config(use_sliding_window=True, sliding_window=4, max_window_layers=0, num_hidden_layers=2)
    with pytest.raises(ValueError, match="sliding-window"):
        packing.check_packable(Qwen2ForCausalLM, sliding, key)
    packing.check_packable(Qwen2ForCausalLM, Qwen2Config(), key)  # a plain Qwen2 packs


def test_packed_with_gradient_checkpointing(tiny_dir):
    """The cu_seqlens keywords survive checkpointed decoder layers (recomputed in backward)."""
    packing.register()
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation=packing.ATTN_NAME,
                                                 dtype=torch.float32)
    b = make_batch(seed=11)
    mask = b["response_mask"].float()
    lp, _ = response_log_probs(model, b, 1.0)
    (lp * mask).sum().backward()
    want = grads(model)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    lp_packed, _ = response_log_probs(model, b, 1.0, remove_padding=True)
    (lp_packed * mask).sum().backward()
    torch.testing.assert_close(lp_packed.detach() * mask, lp.detach() * mask, atol=1e-5, rtol=1e-5)
    assert_grads_close(grads(model), want)
