"""Exact mode (actor_rollout_ref.rollout.exact, issue 39, docs/exact-mode.md): the static decoder's log-probs are
bit-equal (torch.equal) to the actor's for the same tokens, across batch sizes, left padding, packing
(use_remove_padding) and micro-batch sizes, on the CPU in fp32 with the built-in tiny model; with the key off the
same comparisons differ (so these tests can fail). Also the attention alone on sequences longer than a key tile,
and the refusals by name at config resolve time."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.rollout import batch_invariant as bi
from engine.config import ConfigError, build_config
from engine.protocol import Batch
from engine.rollout.hf_rollout import assemble
from engine.rollout.static_decoder import StaticDecoder
from engine.workers import packing
from engine.workers.forward import batched_log_probs

QUESTIONS = ["12+7=?", "3+4=?", "82+53=?", "100+200=?", "1+1=?", "45+67=?", "9+9=?", "123+456=?", "7+70=?",
             "31+9=?", "5+55=?", "640+2=?", "8+1=?", "77+23=?", "2+2=?", "909+91=?"]
RESPONSE = 12
TEMPERATURE = 0.9


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def load(tiny_dir, exact: bool):
    from transformers import AutoModelForCausalLM

    if exact:
        bi.register()
        attn = bi.ATTN_NAME
    else:
        packing.register()  # padded calls run SDPA, packed ones varlen: the default actor's attention
        attn = packing.ATTN_NAME
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32, attn_implementation=attn).eval()
    return bi.make_exact(model) if exact else model


@pytest.fixture(scope="module")
def exact_model(tiny_dir):
    return load(tiny_dir, True)


@pytest.fixture(scope="module")
def default_model(tiny_dir):
    return load(tiny_dir, False)


def prompts(tokenizer, questions: list[str], extra_pad: int = 0) -> Batch:
    """Left-padded chat prompts, `extra_pad` padding columns beyond the longest."""
    ids = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
           for q in questions]
    ids = [x["input_ids"] if hasattr(x, "keys") else x for x in ids]
    width = max(len(x) for x in ids) + extra_pad
    input_ids = torch.full((len(ids), width), tokenizer.pad_token_id)
    mask = torch.zeros(len(ids), width, dtype=torch.long)
    for i, x in enumerate(ids):
        input_ids[i, width - len(x):] = torch.tensor(x)
        mask[i, width - len(x):] = 1
    return Batch({"input_ids": input_ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)})


def rollout(model, tokenizer, batch: Batch, exact: bool, seed: int = 0, do_sample: bool = True) -> Batch:
    """The static decoder's answers as the hf rollout lays them out, with rollout_log_probs."""
    decoder = StaticDecoder(model, cuda_graphs=False, exact=exact)
    eos = [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    torch.manual_seed(seed)
    responses, log_probs = decoder.generate(batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                                            RESPONSE, eos=eos, pad_id=tokenizer.pad_token_id, do_sample=do_sample,
                                            temperature=TEMPERATURE)
    out = assemble(batch, responses, eos, tokenizer.pad_token_id)
    out.tensors["rollout_log_probs"] = log_probs * out["response_mask"]
    return out


def actor_log_probs(model, batch: Batch, micro: int, packed: bool, exact: bool, max_tokens=None) -> torch.Tensor:
    lp, _ = batched_log_probs(model, batch, micro, TEMPERATURE, remove_padding=packed, exact=exact,
                              max_tokens=max_tokens)
    return lp


def valid(batch: Batch, x: torch.Tensor) -> torch.Tensor:
    return x[batch["response_mask"].bool()]


# ---- the decoder against the actor --------------------------------------------------------------------------
@pytest.mark.parametrize("rows", [16, 5, 1])
def test_exact_rollout_log_probs_equal_the_actors_for_every_micro_batch_and_layout(exact_model, tokenizer, rows):
    batch = rollout(exact_model, tokenizer, prompts(tokenizer, QUESTIONS[:rows]), exact=True)
    assert batch["response_mask"].sum() > rows  # answers of several tokens, of different lengths
    for micro in sorted({1, 3, rows}):
        for packed in (False, True):
            lp = actor_log_probs(exact_model, batch, micro, packed, exact=True)
            assert torch.equal(valid(batch, lp), valid(batch, batch["rollout_log_probs"])), (micro, packed)
    # use_dynamic_bsz: rows regrouped (longest first) into micro-batches by a token budget
    lp = actor_log_probs(exact_model, batch, 1, False, exact=True, max_tokens=60)
    assert torch.equal(valid(batch, lp), valid(batch, batch["rollout_log_probs"]))


def test_exact_log_probs_do_not_depend_on_the_batch_or_its_padding(exact_model, tokenizer):
    """A row decoded alone, with extra left padding, and in a batch of 16 gets the same tokens and log-probs
    (greedy, so the tokens are the model's own choice in each)."""
    full = rollout(exact_model, tokenizer, prompts(tokenizer, QUESTIONS), exact=True, do_sample=False)
    for i in (0, 7):
        for pad in (0, 5):
            alone = rollout(exact_model, tokenizer, prompts(tokenizer, QUESTIONS[i:i + 1], extra_pad=pad),
                            exact=True, do_sample=False)
            assert torch.equal(alone["responses"][0], full["responses"][i])
            assert torch.equal(alone["rollout_log_probs"][0], full["rollout_log_probs"][i]), (i, pad)


def test_with_the_key_off_the_same_comparisons_differ(default_model, tokenizer):
    """The default path (SDPA/varlen attention, untiled matmuls and log-softmax) is close but not bit-equal: the
    exact tests above would fail on it."""
    batch = rollout(default_model, tokenizer, prompts(tokenizer, QUESTIONS), exact=False)
    differs = []
    for micro in (1, 3, 16):
        for packed in (False, True):
            lp = actor_log_probs(default_model, batch, micro, packed, exact=False)
            a, b = valid(batch, lp), valid(batch, batch["rollout_log_probs"])
            assert torch.allclose(a, b, atol=1e-4)  # the same model, only rounded differently
            differs.append(not torch.equal(a, b))
    assert all(differs), differs


def test_exact_and_default_models_agree_to_rounding(exact_model, default_model, tokenizer):
    """Exact mode changes how sums are ordered, not what is computed."""
    batch = rollout(exact_model, tokenizer, prompts(tokenizer, QUESTIONS), exact=True)
    a = actor_log_probs(exact_model, batch, 16, False, exact=True)
    b = actor_log_probs(default_model, batch, 16, False, exact=False)
    assert torch.allclose(valid(batch, a), valid(batch, b), atol=1e-4)


def test_exact_update_forward_with_gradients_gives_the_same_log_probs(exact_model, tokenizer):
    """The update's forward (training mode, autograd on) is the one exact mode checks against the rollout."""
    from engine.workers.forward import micro_batches, response_log_probs

    batch = rollout(exact_model, tokenizer, prompts(tokenizer, QUESTIONS), exact=True)
    exact_model.train()
    try:
        mbs, _ = micro_batches(batch, 4)
        lps = []
        for mb in mbs:
            lp, _ = response_log_probs(exact_model, mb, TEMPERATURE, exact=True)
            lp.sum().backward()  # gradients flow through the tiled ops
            lps.append(F.pad(lp.detach(), (0, RESPONSE - lp.shape[1])))
    finally:
        exact_model.zero_grad(set_to_none=True)
        exact_model.eval()
    assert torch.equal(valid(batch, torch.cat(lps)), valid(batch, batch["rollout_log_probs"]))


# ---- the attention alone: several key tiles ------------------------------------------------------------------
def test_exact_attention_padded_packed_and_decode_agree_over_several_key_tiles():
    torch.manual_seed(0)
    lens, n_q, n_kv, dim = [150, 3, 70], 4, 2, 16
    width = max(lens) + 9  # extra left padding
    q = torch.randn(len(lens), n_q, width, dim)
    k = torch.randn(len(lens), n_kv, width, dim)
    v = torch.randn(len(lens), n_kv, width, dim)
    valid_ = torch.zeros(len(lens), width, dtype=torch.bool)
    for i, n in enumerate(lens):
        valid_[i, width - n:] = True
    pos = torch.arange(width)
    mask = ((pos[None, :] <= pos[:, None])[None] & valid_[:, None, :]) | torch.eye(width, dtype=torch.bool)[None]
    padded, _ = bi.exact_attention(None, q, k, v, mask[:, None])
    # packed: the valid tokens of all rows in one row
    flat = [x.transpose(1, 2)[valid_] for x in (q, k, v)]  # [T, H, D]
    cu = F.pad(torch.tensor(lens).cumsum(0), (1, 0)).to(torch.int32)
    packed, _ = bi.exact_attention(None, *(x.transpose(0, 1)[None] for x in flat), None, cu_seq_lens_q=cu)
    assert torch.equal(packed[0], padded[valid_])
    # decode: one query per row at a time, over the whole key buffer with a [B, 1, 1, W] mask
    for t in (width - 1, width - 40, width - 3):
        step_mask = (valid_ & (pos <= t))[:, None, None, :]
        one, _ = bi.exact_attention(None, q[:, :, t:t + 1], k, v, step_mask)
        rows = valid_[:, t]
        assert torch.equal(one[rows, 0], padded[rows, t]), t
    # and it is attention: SDPA's numbers up to rounding
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=mask[:, None])
    assert torch.allclose(padded[valid_], ref.transpose(1, 2)[valid_], atol=1e-5)


def test_tiled_rows_results_do_not_depend_on_the_row_count():
    torch.manual_seed(1)
    linear = torch.nn.Linear(128, 96)
    x = torch.randn(200, 128)
    whole = bi.exact_linear(linear, x)
    for lo, hi in ((0, 1), (5, 6), (3, 70), (130, 200)):
        assert torch.equal(bi.exact_linear(linear, x[lo:hi]), whole[lo:hi])
    assert torch.allclose(whole, linear(x), atol=1e-5)


# ---- refusals by name -------------------------------------------------------------------------------------------
EXACT = "actor_rollout_ref.rollout.exact=True"


def test_exact_is_one_schema_key_off_by_default():
    assert build_config([]).actor_rollout_ref.rollout.exact is False
    assert build_config([EXACT]).actor_rollout_ref.rollout.exact is True


@pytest.mark.parametrize("overrides, key", [
    (["actor_rollout_ref.rollout.name=vllm"], "actor_rollout_ref.rollout.exact"),
    (["+actor_rollout_ref.rollout.engine_kwargs.hf.decode=generate"], "actor_rollout_ref.rollout.exact"),
    (["+actor_rollout_ref.rollout.engine_kwargs.hf.compile_step=true"],
     "actor_rollout_ref.rollout.engine_kwargs.hf.compile_step"),
    (["actor_rollout_ref.model.lora_rank=8"], "actor_rollout_ref.model.lora_rank"),
    (["trainer.v1.trainer_mode=colocate_async", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
      "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=2"], "trainer.v1.trainer_mode"),
    (["actor_rollout_ref.rollout.multi_turn.enable=True"], "actor_rollout_ref.rollout.multi_turn.enable"),
    (["algorithm.rollout_correction.rollout_is=token"], "algorithm.rollout_correction.rollout_is"),
])
def test_what_exact_mode_cannot_run_is_refused_by_name(overrides, key):
    with pytest.raises(ConfigError) as err:
        build_config([EXACT, *overrides])
    assert err.value.key == key
    assert "actor_rollout_ref.rollout.exact" in str(err.value) and "exact=False" in str(err.value)


def test_exact_attention_gradient_is_attentions_gradient():
    """Training: the forward is the exact one, the backward SDPA's gradient of the same function."""
    torch.manual_seed(2)
    q = torch.randn(2, 4, 90, 16, requires_grad=True)
    k = torch.randn(2, 2, 90, 16, requires_grad=True)
    v = torch.randn(2, 2, 90, 16, requires_grad=True)
    valid_ = torch.ones(2, 90, dtype=torch.bool)
    valid_[1, :30] = False
    pos = torch.arange(90)
    mask = (((pos[None, :] <= pos[:, None])[None] & valid_[:, None, :]) | torch.eye(90, dtype=torch.bool)[None])[:, None]
    out, _ = bi.exact_attention(None, q, k, v, mask)
    with torch.no_grad():
        assert torch.equal(out, bi.exact_attention(None, q, k, v, mask)[0])  # the same forward with and without grad
    w = torch.randn_like(out)
    grads = torch.autograd.grad((out * w).sum(), (q, k, v))
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=mask)
    ref_grads = torch.autograd.grad((ref.transpose(1, 2) * w).sum(), (q, k, v))
    for g, r in zip(grads, ref_grads):
        assert torch.allclose(g, r, atol=1e-5)


def test_a_step_that_is_not_exact_fails_naming_the_key():
    """The driver's side: the update's check sums (engine/workers/actor.exact_check) become verl's mismatch metrics,
    and a single token that is not bit-equal stops the run."""
    from engine.trainer.rollout_mismatch import NotExactError, check_exact, exact_metrics
    from engine.workers.actor import exact_check
    from engine.workers.update import Metrics

    rollout_lp = torch.tensor([[-0.5, -1.0, -2.0], [-0.1, -3.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    for actor_lp, bad in ((rollout_lp.clone(), 0), (rollout_lp + torch.tensor([[0, 1e-7, 0], [0, 0, 5.0]]), 1)):
        metrics = Metrics()
        exact_check(actor_lp, torch.ones_like(actor_lp), rollout_lp, mask, metrics)
        m = exact_metrics(metrics.floats())
        assert m["exact/checked_tokens"] == 5 and m["exact/mismatched_tokens"] == bad  # the masked 5.0 is not counted
        if not bad:
            assert m["training/rollout_probs_diff_max"] == 0 and m["rollout_corr/k3_kl"] == 0
            check_exact(m, 3)
        else:
            assert m["training/rollout_probs_diff_max"] > 0
            with pytest.raises(NotExactError, match=r"actor_rollout_ref.rollout.exact=True: step 3 is not exact: 1 of 5"):
                check_exact(m, 3)
    with pytest.raises(NotExactError, match="checked no token"):
        check_exact({}, 4)
