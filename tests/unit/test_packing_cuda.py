"""use_remove_padding on CUDA (skipped elsewhere): torch's varlen FlashAttention is found and used; a random-init
Qwen2.5-0.5B in bf16 gives packed logits as close to an fp32 reference as the padded path's; on ragged batches
both paths give finite gradients (the padded one through the engine's mask: no query row left without a key)
that agree, for the actor, the reference's log-probs and the critic."""
from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForTokenClassification

from engine.models.random import ARCHS
from engine.workers import packing
from engine.workers.forward import (
    packed_response_logits,
    padded_attention_mask,
    response_log_probs,
    response_logits,
    response_values,
)
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


def _ragged(config, seed=1):
    # prompts of 120/9/64/33 tokens, answers of 80/200/7/150: left padding up to 111 columns
    return make_batch([120, 9, 64, 33], [80, 200, 7, 150], config.vocab_size, seed=seed, prompt=120,
                      resp=200).to("cuda")


def _grads(model) -> dict[str, torch.Tensor]:
    out = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


def _flat(g: dict) -> torch.Tensor:
    return torch.cat([x.flatten() for x in g.values()])


def _check_grads(name: str, padded: dict, packed: dict, reference: dict) -> None:
    """Both bf16 paths finite in every tensor, and as close to the fp32 reference as each other."""
    for label, g in (("padded", padded), ("packed", packed)):
        bad = [k for k, v in g.items() if not v.isfinite().all()]
        assert not bad, f"{name} {label}: non-finite gradients in {len(bad)}/{len(g)} tensors, e.g. {bad[:3]}"
    ref, a, b = _flat(reference), _flat(padded), _flat(packed)
    cos = float(torch.nn.functional.cosine_similarity(a, b, dim=0))
    e_pad, e_pack = rel_err(a, ref), rel_err(b, ref)
    print(f"\n{name}: gradient cosine packed vs padded (bf16) {cos:.5f}; relative error vs fp32: padded "
          f"{e_pad:.2e}, packed {e_pack:.2e}")
    assert cos > 0.99
    assert e_pack < 1.5 * e_pad + 1e-2


def test_padded_mask_is_what_fixes_bf16_gradients():
    """Diagnosis, printed: the 2D mask (padding query rows with nothing to attend to) against the engine's
    padded mask, on SDPA's CUDA kernels in bf16. The engine's mask must give finite gradients."""
    torch.manual_seed(0)
    config = Qwen2Config(**dict(ARCHS["qwen2.5-0.5b"], num_hidden_layers=4))
    model = Qwen2ForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16).cuda()
    b = _ragged(config)
    valid = b["response_mask"].bool()
    keep = torch.arange(120 - 1, 320 - 1, device="cuda")
    found = {}
    for label, mask in (("2D mask", b["attention_mask"]), ("engine mask", padded_attention_mask(b["attention_mask"]))):
        logits = model(input_ids=b["input_ids"], attention_mask=mask, position_ids=b["position_ids"],
                       logits_to_keep=keep).logits[valid]
        torch.log_softmax(logits.float(), -1).sum().backward()
        g = _grads(model)
        found[label] = sum(not v.isfinite().all() for v in g.values()), len(g), bool(logits.isfinite().all())
    print("\n" + "; ".join(f"{k}: {n}/{t} gradient tensors non-finite, logits finite {f}"
                            for k, (n, t, f) in found.items()))
    assert found["engine mask"][0] == 0


def test_actor_reference_critic_packed_match_padded_bf16():
    """actor (log-prob + entropy gradients), reference (no-grad log-probs), critic (value gradients): padded
    and packed in bf16 on ragged batches, each against an fp32 padded reference."""
    packing.register()
    torch.manual_seed(0)
    config = Qwen2Config(**dict(ARCHS["qwen2.5-0.5b"], num_hidden_layers=4))
    b = _ragged(config)
    mask = b["response_mask"].float()
    weights = torch.randn(mask.shape, device="cuda", generator=torch.Generator("cuda").manual_seed(3))

    lm = Qwen2ForCausalLM._from_config(config, attn_implementation=packing.ATTN_NAME, dtype=torch.float32).cuda()
    out = {}
    for label, dtype, packed in (("fp32", torch.float32, False), ("padded", torch.bfloat16, False),
                                 ("packed", torch.bfloat16, True)):
        lm.to(dtype)
        lp, ent = response_log_probs(lm, b, 0.7, calc_entropy=True, remove_padding=packed)
        ((lp * weights * mask).sum() + 0.1 * (ent * mask).sum()).backward()
        with torch.no_grad():  # the reference: a forward pass only
            ref_lp, _ = response_log_probs(lm, b, 0.7, remove_padding=packed)
        out[label] = (lp.detach()[mask.bool()], _grads(lm), ref_lp[mask.bool()])
    e_pad, e_pack = rel_err(out["padded"][0], out["fp32"][0]), rel_err(out["packed"][0], out["fp32"][0])
    print(f"\nactor log-probs: relative error vs fp32 padded {e_pad:.2e}, packed {e_pack:.2e}")
    assert out["packed"][0].isfinite().all() and e_pack < 1.5 * e_pad + 1e-3
    _check_grads("actor", out["padded"][1], out["packed"][1], out["fp32"][1])
    r_pad, r_pack = rel_err(out["padded"][2], out["fp32"][2]), rel_err(out["packed"][2], out["fp32"][2])
    print(f"reference log-probs: relative error vs fp32 padded {r_pad:.2e}, packed {r_pack:.2e}")
    assert r_pack < 1.5 * r_pad + 1e-3
    del lm

    torch.manual_seed(0)
    critic_cfg = Qwen2Config(**dict(ARCHS["qwen2.5-0.5b"], num_hidden_layers=4), num_labels=1,
                             classifier_dropout=0.0)
    critic = Qwen2ForTokenClassification._from_config(critic_cfg, attn_implementation=packing.ATTN_NAME,
                                                      dtype=torch.float32).cuda()
    returns = torch.randn(mask.shape, device="cuda", generator=torch.Generator("cuda").manual_seed(4))
    vals = {}
    for label, dtype, packed in (("fp32", torch.float32, False), ("padded", torch.bfloat16, False),
                                 ("packed", torch.bfloat16, True)):
        critic.to(dtype)
        v = response_values(critic, b, remove_padding=packed)
        (((v - returns) ** 2) * mask).sum().backward()
        vals[label] = (v.detach()[mask.bool()], _grads(critic))
    v_pad, v_pack = rel_err(vals["padded"][0], vals["fp32"][0]), rel_err(vals["packed"][0], vals["fp32"][0])
    print(f"critic values: relative error vs fp32 padded {v_pad:.2e}, packed {v_pack:.2e}")
    assert v_pack < 1.5 * v_pad + 1e-3
    _check_grads("critic", vals["padded"][1], vals["packed"][1], vals["fp32"][1])
