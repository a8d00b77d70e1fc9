"""use_remove_padding on CUDA (skipped elsewhere): torch's varlen FlashAttention is found and used, and a
random-init Qwen2.5-0.5B in bf16 gives packed logits as close to an fp32 reference as the padded path's."""
from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from engine.models.random import ARCHS
from engine.workers import packing
from engine.workers.forward import packed_response_logits, response_logits
from tests.unit.test_packing import make_batch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def test_flash_varlen_is_found_and_matches_the_emulation():
    found = packing.torch_varlen()
    assert found is not None, f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn"
    print(f"\ntorch {torch.__version__}: varlen_attn keywords {sorted(found[1])}")
    g = torch.Generator(device="cuda").manual_seed(0)
    lens = [37, 5, 120, 64, 1]
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    total = sum(lens)
    q, k, v = (torch.randn(total, h, 64, generator=g, device="cuda", dtype=torch.bfloat16).requires_grad_()
               for h in (14, 2, 2))
    flash = packing.flash_varlen(q, k, v, cu, max(lens), 0.125)
    assert flash is not None, "varlen_attn was found but not used for bf16 on CUDA"
    emulated = packing.padded_varlen(q, k, v, cu, max(lens), 0.125)
    assert rel_err(flash, emulated) < 2e-2
    w = torch.randn_like(flash)
    g_flash = torch.autograd.grad((flash * w).sum(), (q, k, v))
    g_emul = torch.autograd.grad((emulated * w).sum(), (q, k, v))
    for a, b in zip(g_flash, g_emul):
        assert rel_err(a, b) < 3e-2


def test_packed_bf16_qwen25_05b_matches_padded():
    packing.register()
    torch.manual_seed(0)
    config = Qwen2Config(**ARCHS["qwen2.5-0.5b"])
    model = Qwen2ForCausalLM._from_config(config, attn_implementation=packing.ATTN_NAME, dtype=torch.float32)
    model = model.cuda().eval()
    b = make_batch([200, 17, 96, 5, 150, 64], [300, 12, 180, 1, 64, 256], config.vocab_size, prompt=200,
                   resp=300).to("cuda")
    valid = b["response_mask"].bool()
    with torch.no_grad():
        ref = response_logits(model, b)[valid]  # fp32, padded: the reference
        model.to(torch.bfloat16)
        padded = response_logits(model, b)[valid]
        packed, _ = packed_response_logits(model, b)
        # negative control: the same packed row with attention across sequences (no cu_seqlens)
        inputs = packing.packed_inputs(b["input_ids"], b["attention_mask"], b["position_ids"])
        inputs = {k: inputs[k] for k in ("input_ids", "position_ids", "attention_mask")}
        _, keep = packing.response_sources(b["attention_mask"], b["responses"].shape[1])
        leaky = model(**inputs, use_cache=False, logits_to_keep=keep).logits[0]
    e_padded, e_packed, e_leaky = rel_err(padded, ref), rel_err(packed, ref), rel_err(leaky, ref)
    print(f"\nrelative error vs fp32 padded: padded bf16 {e_padded:.2e}, packed bf16 {e_packed:.2e}, "
          f"packed without sequence boundaries {e_leaky:.2e}")
    assert e_packed < 1.5 * e_padded + 1e-3
    assert e_leaky > 5 * e_packed  # the check can tell attention leaking across sequences


def test_packed_bf16_gradients_match_padded():
    packing.register()
    torch.manual_seed(0)
    config = Qwen2Config(**dict(ARCHS["qwen2.5-0.5b"], num_hidden_layers=4))
    model = Qwen2ForCausalLM._from_config(config, attn_implementation=packing.ATTN_NAME,
                                          dtype=torch.bfloat16).cuda()
    b = make_batch([120, 9, 64, 33], [80, 200, 7, 150], config.vocab_size, seed=1, prompt=120, resp=200).to("cuda")
    valid = b["response_mask"].bool()
    grads = []
    for packed in (False, True):
        if packed:
            logits, _ = packed_response_logits(model, b)
        else:
            logits = response_logits(model, b)[valid]
        torch.log_softmax(logits.float(), -1).gather(-1, b["responses"][valid][:, None]).sum().backward()
        grads.append(torch.cat([p.grad.flatten().float() for p in model.parameters()]))
        model.zero_grad(set_to_none=True)
    cos = float(torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0))
    print(f"\ngradient cosine packed vs padded (bf16): {cos:.5f}, relative diff {rel_err(grads[1], grads[0]):.2e}")
    assert cos > 0.99
