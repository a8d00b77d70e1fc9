"""The one-kernel sampling of the static decoder (engine/rollout/kernels/fused_sampling.py), run on CPU through Triton's
interpreter: greedy tokens and log-probs equal torch's, sampled tokens follow softmax(logits / T) (a chi-square
test over 600 draws), the end tokens are held back until min_new_tokens, a row's tokens depend only on its index
in the original batch and the step; then a whole static decode with the kernel (and the Triton decode attention)
inside (also in a torch.compile'd decode step): log-probs equal the actor's recomputation and dropping finished
rows changes no token."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

from tests.checkout_path import ROOT, with_checkout
from tests.triton_interpreter import interpreter_problem

KERNEL = textwrap.dedent("""
    import torch
    from engine.rollout.kernels.fused_sampling import fused_sample

    def args(rows, step=0, seed=11):
        return dict(seed=torch.tensor(seed), step=torch.tensor(step), rows=rows)

    torch.manual_seed(0)
    # greedy over several blocks (block 16: 300 ids = 10 blocks of two halves), temperature folded in, the end
    # token (row 0's best) held back while step < min_new_tokens, its log-prob taken before that mask
    x = torch.randn(5, 300) * 3
    truth = torch.log_softmax(x / 0.7, -1)
    eos = x[0].argmax().view(1)
    for step, banned in ((2, True), (5, False)):
        tok, lp = fused_sample(x, do_sample=False, temperature=0.7, eos=eos, min_new_tokens=5, block=16,
                               **args(torch.arange(5), step))
        masked = truth.clone()
        if banned:
            masked[:, eos] = float("-inf")
        assert torch.equal(tok, masked.argmax(-1)), (step, tok, masked.argmax(-1))
        assert (lp - truth.gather(1, tok[:, None]).squeeze(1)).abs().max() < 1e-5
    print("GREEDY ok")

    # sampled: the frequencies of 600 draws from one distribution (each row its own noise stream)
    logit = torch.tensor([1.2, 0.3, -0.4, 0.9, -1.5, 0.0])
    n = 600
    tok, lp = fused_sample(logit.expand(n, 6).contiguous(), temperature=0.8, block=16, **args(torch.arange(n)))
    p = torch.softmax(logit.double() / 0.8, -1)
    counts = torch.bincount(tok, minlength=6).double()
    chi2 = float(((counts - n * p) ** 2 / (n * p)).sum())
    assert (lp - torch.log(p.float())[tok]).abs().max() < 1e-5
    print("CHI2", chi2, counts.tolist(), (n * p).round().tolist())

    # the end token, far the likeliest, is never drawn while held back, and always once allowed
    x = torch.randn(6, 40)
    x[:, 7] = 30.0
    held, _ = fused_sample(x, eos=torch.tensor([7, 9]), min_new_tokens=3, block=16, **args(torch.arange(6), 2))
    free, _ = fused_sample(x, eos=torch.tensor([7, 9]), min_new_tokens=3, block=16, **args(torch.arange(6), 3))
    assert not ((held == 7) | (held == 9)).any() and (free == 7).all(), (held, free)

    # a row's draw depends on (seed, its original row index, step) only
    x = torch.zeros(8, 300)  # uniform: every id equally likely
    full, _ = fused_sample(x, block=16, **args(torch.arange(8), 4))
    sub, _ = fused_sample(x[[5, 2]].contiguous(), block=16, **args(torch.tensor([5, 2]), 4))
    nxt, _ = fused_sample(x, block=16, **args(torch.arange(8), 5))
    other, _ = fused_sample(x, block=16, **args(torch.arange(8), 4, seed=12))
    assert torch.equal(sub, full[[5, 2]]), (sub, full)
    assert not torch.equal(nxt, full) and not torch.equal(other, full)
    assert len(set(full.tolist())) > 4, full  # rows draw independently
    print("KERNEL ok")
""")

DECODE = textwrap.dedent("""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from engine.protocol import Batch
    from engine.workers.forward import response_log_probs
    from engine.rollout.hf_rollout import assemble
    from engine.rollout import static_decoder
    from engine.rollout.static_decoder import StaticDecoder

    EOS, PAD = 3, 0
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                      eos_token_id=EOS, pad_token_id=PAD, tie_word_embeddings=True)
    model = Qwen2ForCausalLM._from_config(cfg, attn_implementation="sdpa").eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 256, (6, 9), generator=g)
    am = torch.ones(6, 9, dtype=torch.long)
    am[0, :4] = 0
    ids[am == 0] = PAD
    pos = (am.cumsum(-1) - 1).clamp(min=0)

    def decode(dec, **kw):
        torch.manual_seed(3)
        return dec.generate(ids, am, pos, kw.pop("length", 10), eos=[EOS], pad_id=PAD, **kw)

    # plain sampling: the fused kernels run and the log-probs are the actor's
    dec = StaticDecoder(model, fused_sampling=True, triton_attention=True)
    resp, lp = decode(dec, min_new_tokens=10, temperature=0.9)
    assert dec.last_stats["sampling"] == "fused" and dec.last_stats["attention"] == "triton", dec.last_stats
    batch = assemble(Batch({"input_ids": ids, "attention_mask": am, "position_ids": pos}), resp, [EOS], PAD)
    assert batch["response_mask"].all()
    with torch.no_grad():
        actor, _ = response_log_probs(model, batch, 0.9)
    worst = (actor - lp).abs().max().item()
    assert worst < 1e-4, worst

    # the whole step compiled (torch.compile, the attention kernel an opaque custom operator in its graph; traced
    # as on a GPU, run by the aot_eager backend: no inductor C++ code generation on the CPU)
    static_decoder.STEP_COMPILE_BACKEND = "aot_eager"
    compiled = StaticDecoder(model, fused_sampling=True, triton_attention=True, compile_step=True)
    c_resp, c_lp = decode(compiled, min_new_tokens=10, temperature=0.9)  # same seed: the same tokens
    assert compiled.last_stats["compiled"] == "step" and compiled.last_stats["attention"] == "triton"
    assert torch.equal(c_resp, resp) and (c_lp - lp).abs().max() < 1e-4

    # greedy: the same tokens as the torch path; top-p: the torch path is used
    sampler = StaticDecoder(model, fused_sampling=True)
    greedy, _ = decode(sampler, do_sample=False)
    plain, _ = decode(StaticDecoder(model), do_sample=False)
    assert sampler.last_stats["sampling"] == "fused" and torch.equal(greedy, plain)
    decode(sampler, top_p=0.9)
    assert sampler.last_stats["sampling"] == "torch"

    # rows end at different steps (the end token made likely); dropping them changes no token
    bias = torch.zeros(256)
    bias[EOS] = 3.5
    outs = []
    for every in (0, 2):
        dec = StaticDecoder(model, fused_sampling=True, compact_every=every, compact_below=1.0)
        handle = dec.bind().lm_head.register_forward_hook(lambda m, i, o: o + bias)
        outs.append((*decode(dec, length=24), dec.last_stats))
        handle.remove()
    (ref, ref_lp, _), (out, out_lp, stats) = outs
    lengths = (ref != PAD).sum(1)
    assert lengths.min() < lengths.max() and stats["compactions"] and stats["sampling"] == "fused", (lengths, stats)
    assert torch.equal(out, ref) and (out_lp - ref_lp).abs().max() < 1e-5
    print("DECODE ok", lengths.tolist(), stats["compactions"])
""")


def _interpret(script: str) -> str:
    if why := interpreter_problem():
        pytest.skip(why)
    env = with_checkout(TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-c", script], check=False, env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    return run.stdout


def test_kernel_samples_softmax_holds_end_tokens_and_keys_noise_by_row():
    out = _interpret(KERNEL)
    assert "GREEDY ok" in out and "KERNEL ok" in out
    chi2 = float(out.split("CHI2")[1].split()[0])
    assert chi2 < 20.5, out  # 5 degrees of freedom: the 0.1% critical value


def test_whole_static_decode_with_the_kernels_inside():
    out = _interpret(DECODE)
    assert "DECODE ok" in out, out


cuda = pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")


@cuda
def test_cuda_kernel_on_qwen_vocabulary_in_bf16():
    """Compiled for the GPU, on bf16 logits of Qwen's vocabulary: greedy = torch's argmax, log-probs = torch's
    log-softmax, and 4,096 draws over a 151,936-id distribution concentrated on 8 ids follow it."""
    import torch

    from engine.rollout.kernels.fused_sampling import fused_sample

    g = torch.Generator(device="cuda").manual_seed(0)
    vocab = 151936
    x = (torch.randn(64, vocab, device="cuda", generator=g) * 2).bfloat16()
    kw = dict(seed=torch.tensor(3, device="cuda"), step=torch.tensor(0, device="cuda"),
              rows=torch.arange(64, device="cuda"))
    truth = torch.log_softmax(x.float() / 0.8, -1)
    tok, lp = fused_sample(x, do_sample=False, temperature=0.8, **kw)
    assert torch.equal(tok, truth.argmax(-1))
    tok, lp = fused_sample(x, do_sample=True, temperature=0.8, **kw)
    assert (truth.gather(1, tok[:, None]).squeeze(1) - lp).abs().max() < 1e-3
    n = 4096
    logit = torch.full((vocab,), -30.0, device="cuda")
    logit[[5, 77, 1000, 5000, 70000, 100000, 150000, 151935]] = torch.tensor(
        [1.0, 0.5, 0.0, -0.5, 1.5, 0.2, -1.0, 0.8], device="cuda")
    tok, _ = fused_sample(logit.bfloat16().expand(n, vocab).contiguous(), seed=torch.tensor(9, device="cuda"),
                          step=torch.tensor(0, device="cuda"), rows=torch.arange(n, device="cuda"))
    p = torch.softmax(logit.bfloat16().double(), -1)
    counts = torch.bincount(tok, minlength=vocab).double()
    ids = p > 1e-6
    assert counts[~ids].sum() == 0
    chi2 = float(((counts[ids] - n * p[ids]) ** 2 / (n * p[ids])).sum())
    assert chi2 < 24.3, (chi2, counts[ids].tolist())  # 7 degrees of freedom, 0.1% critical value


@cuda
def test_cuda_static_decode_with_every_option_samples_the_actors_distribution(tmp_path):
    """The static decoder with CUDA graphs and the fused sampling, the Triton attention and the compiled step, alone
    and together, on the tiny Qwen2 in bf16: the rollout's log-probs are the actor's (bf16 tolerance)."""
    import torch
    from transformers import AutoModelForCausalLM

    from engine.models.random import build_random_model
    from engine.protocol import Batch
    from engine.rollout.hf_rollout import assemble
    from engine.rollout.static_decoder import StaticDecoder
    from engine.workers.forward import response_log_probs
    from tests.unit.test_static_decoder import EOS, PAD, prompts

    build_random_model("tiny-qwen2", tmp_path, dtype="bfloat16")
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16, attn_implementation="sdpa")
    model = model.cuda().eval()
    ids, am, pos = (t.cuda() for t in prompts(b=8, p=9))
    for opts in ({"fused_sampling": True}, {"compile_step": True},
                 {"fused_sampling": True, "triton_attention": True, "compile_step": True}):
        torch.manual_seed(1)
        dec = StaticDecoder(model, compile_blocks=True, **opts)
        resp, lp = dec.generate(ids, am, pos, 40, eos=[EOS], pad_id=PAD, min_new_tokens=40, do_sample=True)
        stats = dec.last_stats
        assert stats["sampling"] == ("fused" if opts.get("fused_sampling") else "torch"), (opts, stats)
        assert stats["compiled"] == ("step" if opts.get("compile_step") else "blocks"), (opts, stats)
        batch = assemble(Batch({"input_ids": ids, "attention_mask": am, "position_ids": pos}), resp, [EOS], PAD)
        with torch.no_grad():
            actor, _ = response_log_probs(model, batch, 1.0)
        assert (actor.float() - lp).abs().mean() < 2e-2, opts
