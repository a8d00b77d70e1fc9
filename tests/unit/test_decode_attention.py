"""The one-kernel decode attention (engine/rollout/kernels/decode_attention.py) against the eager grouped attention of
the static decoder: on CPU through Triton's interpreter (fp32: the interpreter's bf16 matrix products are not
faithful), on CUDA (skipped elsewhere) compiled, in bf16, inside a whole static decode with a CUDA graph."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

triton = pytest.importorskip("triton")

from tests.checkout_path import ROOT, with_checkout
from tests.triton_interpreter import interpreter_problem

CHECK = textwrap.dedent("""
    import torch
    from engine.rollout.kernels.decode_attention import decode_attention
    from engine.rollout.static_attention import grouped_attention

    torch.manual_seed(0)
    worst = 0.0
    for n_q, n_kv, dim in ((14, 2, 64), (4, 4, 32), (8, 2, 16)):
        B, L = 3, 150
        q = torch.randn(B, 1, n_q, dim).transpose(1, 2)  # the [B, H, 1, D] view transformers passes
        k, v = torch.randn(B, n_kv, L, dim), torch.randn(B, n_kv, L, dim)
        valid = torch.ones(B, L, dtype=torch.bool)
        valid[0, :5] = False   # left padding
        valid[2, 3:70] = False  # a long masked run: whole blocks without a key
        for n in (6, 64, 65, 130, 150):
            mask = (valid & (torch.arange(L) < n))[:, None, None, :]
            ref, _ = grouped_attention(None, q, k, v, mask, scaling=dim ** -0.5)
            # keys past n hold garbage: the kernel must not read them even where the mask would allow it
            k2, v2 = k.clone(), v.clone()
            k2[:, :, n:], v2[:, :, n:] = 1e4, float("nan")
            out = decode_attention(q, k2, v2, valid[:, None, None, :], torch.tensor(n), dim ** -0.5)
            assert out.shape == ref.shape == (B, 1, n_q, dim)
            worst = max(worst, (out - ref).abs().max().item())
    print("WORST", worst)
""")


def test_kernel_matches_eager_attention_in_the_triton_interpreter():
    if why := interpreter_problem():
        pytest.skip(why)
    run = subprocess.run([sys.executable, "-c", CHECK], check=False, env=with_checkout(TRITON_INTERPRET="1"), cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    worst = float(run.stdout.split("WORST")[-1])
    assert worst < 1e-5, worst


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
def test_cuda_kernel_matches_eager_in_bf16_on_qwen05_heads():
    from engine.rollout.kernels.decode_attention import decode_attention
    from engine.rollout.static_attention import grouped_attention

    g = torch.Generator(device="cuda").manual_seed(0)
    B, L, n_q, n_kv, dim = 64, 512, 14, 2, 64
    q = torch.randn(B, 1, n_q, dim, device="cuda", generator=g).bfloat16().transpose(1, 2)
    k = torch.randn(B, n_kv, L, dim, device="cuda", generator=g).bfloat16()
    v = torch.randn(B, n_kv, L, dim, device="cuda", generator=g).bfloat16()
    valid = torch.rand(B, L, device="cuda", generator=g) > 0.1
    for n in (257, 300, 512):
        valid[:, n - 1] = True
        mask = (valid & (torch.arange(L, device="cuda") < n))[:, None, None, :]
        ref, _ = grouped_attention(None, q.float(), k.float(), v.float(), mask, scaling=dim ** -0.5)
        eager, _ = grouped_attention(None, q, k, v, mask, scaling=dim ** -0.5)
        out = decode_attention(q, k, v, mask, torch.tensor(n, device="cuda"), dim ** -0.5)
        # at least as close to fp32 as the eager bf16 path
        assert (out.float() - ref).abs().max() <= (eager.float() - ref).abs().max() + 1e-3


@cuda
def test_cuda_static_decode_uses_the_kernel_and_samples_the_actors_distribution(tmp_path):
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
    results = {}
    for on in (True, False):
        torch.manual_seed(1)
        dec = StaticDecoder(model, triton_attention=on)
        resp, lp = dec.generate(ids, am, pos, 40, eos=[EOS], pad_id=PAD, min_new_tokens=40, do_sample=True)
        assert dec.last_stats["attention"] == ("triton" if on else "eager")
        results[on] = (resp, lp)
    resp, lp = results[True]
    batch = assemble(Batch({"input_ids": ids, "attention_mask": am, "position_ids": pos}), resp, [EOS], PAD)
    with torch.no_grad():
        actor, _ = response_log_probs(model, batch, 1.0)
    assert (actor.float() - lp).abs().mean() < 2e-2
    # the first answer token comes from the prefill (SDPA in both): same seed, same token
    assert torch.equal(results[True][0][:, 0], results[False][0][:, 0])
