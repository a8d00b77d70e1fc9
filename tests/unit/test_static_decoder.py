"""The static-cache decoder (engine/rollout/static_decoder.py) on a tiny random Qwen2 on CPU: greedy output
equals transformers' generate, and the log-prob it reports for each sampled token equals the actor's own
recomputation (the rollout samples from the actor's distribution)."""
from __future__ import annotations

import pytest
import torch

from engine.protocol import Batch
from engine.rollout.hf_rollout import assemble
from engine.rollout.static_decoder import StaticDecoder
from engine.workers.forward import response_log_probs

EOS, PAD = 151645, 151643


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from engine.models.random import build_random_model

    path = tmp_path_factory.mktemp("tiny-qwen2")
    build_random_model("tiny-qwen2", path, dtype="float32")
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()


def prompts(b=5, p=9):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 94, (b, p), generator=g)
    am = torch.ones(b, p, dtype=torch.long)
    am[0, :4] = 0
    am[1, :1] = 0
    ids[am == 0] = PAD
    return ids, am, (am.cumsum(-1) - 1).clamp(min=0)


def test_greedy_equals_generate(model):
    ids, am, pos = prompts()
    with torch.no_grad():
        ref = model.generate(input_ids=ids, attention_mask=am, do_sample=False, max_new_tokens=7,
                             pad_token_id=PAD, eos_token_id=[EOS])[:, ids.shape[1]:]
    out, _ = StaticDecoder(model).generate(ids, am, pos, 7, eos=[EOS], pad_id=PAD, do_sample=False)
    assert torch.equal(out[:, :ref.shape[1]], ref)


def test_unpadded_prompts_take_the_causal_prefill_and_decode_the_same(model):
    """No padding in any prompt: the prefill runs plain causal SDPA on the shared KV heads instead of the 4-D
    mask; greedy tokens equal `generate` and sampled log-probs equal the actor's."""
    ids, am, pos = prompts()
    ids, am, pos = ids[2:], am[2:], pos[2:]  # the rows without padding
    assert am.all()
    with torch.no_grad():
        ref = model.generate(input_ids=ids, attention_mask=am, do_sample=False, max_new_tokens=7,
                             pad_token_id=PAD, eos_token_id=[EOS])[:, ids.shape[1]:]
    out, _ = StaticDecoder(model).generate(ids, am, pos, 7, eos=[EOS], pad_id=PAD, do_sample=False)
    assert torch.equal(out[:, :ref.shape[1]], ref)
    torch.manual_seed(2)
    resp, lp = StaticDecoder(model).generate(ids, am, pos, 8, eos=[EOS], pad_id=PAD, min_new_tokens=8)
    batch = assemble(Batch({"input_ids": ids, "attention_mask": am, "position_ids": pos}), resp, [EOS], PAD)
    with torch.no_grad():
        actor, _ = response_log_probs(model, batch, 1.0)
    assert (actor - lp).abs().max() < 1e-4


@pytest.mark.parametrize("kw", [dict(temperature=1.0), dict(temperature=0.7, top_k=20, top_p=0.9)])
def test_sampled_log_probs_match_recomputation(model, kw):
    torch.manual_seed(1)
    ids, am, pos = prompts()
    resp, lp = StaticDecoder(model).generate(ids, am, pos, 8, eos=[EOS], pad_id=PAD, min_new_tokens=8,
                                             do_sample=True, **kw)
    batch = assemble(Batch({"input_ids": ids, "attention_mask": am, "position_ids": pos}), resp, [EOS], PAD)
    assert batch["response_mask"].all()  # min_new_tokens = max: no early end
    with torch.no_grad():
        actor, _ = response_log_probs(model, batch, kw["temperature"])
    assert (actor - lp).abs().max() < 1e-4


def test_end_token_stops_a_row_and_pads_after(model):
    ids, am, pos = prompts(b=3)
    # every token is the end token when its logit is forced up: check the bookkeeping after it
    dec = StaticDecoder(model)
    with torch.no_grad():
        bias = torch.zeros(model.config.vocab_size)
        bias[EOS] = 1e4
        twin = dec.bind()  # the decoder runs a hook-free twin that shares the model's tensors
        handle = twin.lm_head.register_forward_hook(lambda m, i, o: o + bias)
        try:
            resp, lp = dec.generate(ids, am, pos, 5, eos=[EOS], pad_id=PAD, min_new_tokens=2, do_sample=True)
        finally:
            handle.remove()
    assert (resp[:, :2] != EOS).all()  # min_new_tokens held the end token back
    assert (resp[:, 2] == EOS).all() and (resp[:, 3:] == PAD).all() and (lp[:, 3:] == 0).all()


@pytest.fixture(scope="module")
def ending_model(tmp_path_factory):
    """Tiny Qwen2 whose end token is likely enough that rows end at different steps (engine.models.random's
    eos_rate): greedy needs it near the best other token's probability, sampling a few percent per token."""
    from transformers import AutoModelForCausalLM

    from engine.models.random import build_random_model

    models = {}
    for rate in (8e-6, 0.05):
        path = tmp_path_factory.mktemp(f"tiny-eos-{rate}")
        build_random_model("tiny-qwen2", path, dtype="float32", eos_rate=rate)
        models[rate] = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                            attn_implementation="sdpa").eval()
    return models


@pytest.mark.parametrize("sample", [False, True])
def test_compaction_changes_no_token(ending_model, sample):
    model = ending_model[0.05 if sample else 8e-6]
    ids, am, pos = prompts(b=12, p=9)
    kw = dict(eos=[EOS], pad_id=PAD, do_sample=sample, temperature=0.9)
    outs = []
    for every, below in ((0, 0.5), (2, 1.0), (4, 0.5)):  # never; whenever a row ended; at most half running
        torch.manual_seed(7)
        dec = StaticDecoder(model, compact_every=every, compact_below=below)
        outs.append((*dec.generate(ids, am, pos, 40, **kw), dec.last_stats))
    (ref, ref_lp, stats0), *compacted = outs
    lengths = (ref != PAD).sum(1)
    assert stats0["compactions"] == [] and lengths.min() < lengths.max() and (lengths > 1).any(), lengths
    for resp, lp, stats in compacted:
        assert torch.equal(resp, ref)  # every token is the same...
        assert (lp - ref_lp).abs().max() < 1e-5
    # ...while rows were really dropped: whenever one ended (the batch shrank step by step), and, sampling,
    # by the default rule too (at most half the rows running)
    shrinking = compacted[0][2]["compactions"]
    assert len(shrinking) >= (2 if sample else 1) and all(a[1] > b[1] for a, b in zip(shrinking, shrinking[1:])), shrinking
    assert bool(compacted[1][2]["compactions"]) == sample, compacted[1][2]


def test_compiled_step_decodes_as_the_eager_step(ending_model, monkeypatch):
    """`compile_step`: the whole decode forward as one torch.compile'd graph (traced by dynamo and AOTAutograd as on
    a GPU; the aot_eager backend skips inductor's CPU code generation): the same greedy tokens, sampled log-probs
    that are the actor's, and after a compaction (new batch shape: compiled again with dynamic shapes) still the
    same tokens as without one."""
    from engine.rollout import static_decoder

    monkeypatch.setattr(static_decoder, "STEP_COMPILE_BACKEND", "aot_eager")
    model = ending_model[0.05]
    ids, am, pos = prompts(b=12, p=9)
    kw = dict(eos=[EOS], pad_id=PAD, temperature=0.9)
    compiled = StaticDecoder(model, compile_step=True, compact_every=0)
    eager = StaticDecoder(model, compact_every=0)
    greedy = [dec.generate(ids, am, pos, 12, do_sample=False, **kw)[0] for dec in (compiled, eager)]
    assert compiled.last_stats["compiled"] == "step" and eager.last_stats["compiled"] == "none"
    assert torch.equal(*greedy)
    outs = []
    for every in (0, 2):
        compiled.compact_every = every
        torch.manual_seed(7)
        outs.append((*compiled.generate(ids, am, pos, 30, do_sample=True, **kw), compiled.last_stats))
    (ref, ref_lp, _), (out, out_lp, stats) = outs
    assert stats["compiled"] == "step" and stats["compactions"], stats
    assert torch.equal(out, ref) and (out_lp - ref_lp).abs().max() < 1e-4
    batch = assemble(Batch({"input_ids": ids, "attention_mask": am, "position_ids": pos}), ref, [EOS], PAD)
    with torch.no_grad():
        actor, _ = response_log_probs(model, batch, 0.9)
    mask = batch["response_mask"].bool()
    assert (actor - ref_lp)[mask].abs().max() < 1e-4


def test_options_that_cannot_run_here_say_so_once(model, capsys):
    """Asking for the Triton kernels on a CPU without Triton's interpreter decodes with the torch paths and says
    why, once per decoder, not once per call."""
    import os

    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("under Triton's interpreter the kernels do run on CPU")
    ids, am, pos = prompts()
    dec = StaticDecoder(model, triton_attention=True, fused_sampling=True)
    for _ in range(2):
        dec.generate(ids, am, pos, 3, eos=[EOS], pad_id=PAD)
    assert dec.last_stats["attention"] == "eager" and dec.last_stats["sampling"] == "torch"
    out = capsys.readouterr().out
    assert out.count("fused sampling needs CUDA (here cpu); sampling with torch") == 1, out
    assert out.count("the Triton decode attention needs CUDA") == 1, out
