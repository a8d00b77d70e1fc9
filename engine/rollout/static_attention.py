"""The static decoder's attention, registered with transformers under its own name: a decode step (one query per
sequence) attends with grouped-query matmuls that read each KV head once, or with the Triton decode kernel when the
decoder passes `decode_keys`; prefill uses SDPA (plain causal when the prompts have no padding)."""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F

ATTN_NAME = "rlstudio_static"

def triton_runs_on(device: torch.device) -> bool:
    """The Triton kernels (decode attention, fused sampling) run on CUDA, and on CPU under Triton's interpreter
    (TRITON_INTERPRET=1: the CPU tests of the kernels inside a whole decode)."""
    return device.type == "cuda" or (device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1")


def grouped_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """query [B, Hq, q, D], key/value [B, Hkv, Lk, D], attention_mask bool [B, 1, q, Lm] (Lm ≤ Lk: keys past
    Lm are not looked at). Returns ([B, q, Hq, D], None) like transformers' attention functions.
    `decode_keys` (a keyword the decoder passes through the model call when the Triton decode attention is on):
    0-d device tensor, the number of key positions this decode step looks at (prompt + tokens fed so far)."""
    kv_len = attention_mask.shape[-1]
    key, value = key[:, :, :kv_len], value[:, :, :kv_len]
    bsz, n_q, q_len, dim = query.shape
    n_kv = key.shape[1]
    if scaling is None:
        scaling = dim ** -0.5
    if q_len == 1 and kwargs.get("decode_keys") is not None:
        from engine.rollout.kernels.decode_attention import decode_attention

        return decode_attention(query, key, value, attention_mask, kwargs["decode_keys"], scaling), None
    if q_len == 1:
        group = n_q // n_kv
        q = query.view(bsz, n_kv, group, dim)  # head h reads KV head h // group (repeat_kv's order)
        scores = torch.matmul(q, key.transpose(-1, -2)).float() * scaling          # [B, Hkv, g, Lk]
        scores = scores.masked_fill(~attention_mask.view(bsz, 1, 1, kv_len), float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(value.dtype)
        out = torch.matmul(probs, value)                                            # [B, Hkv, g, D]
        return out.reshape(bsz, 1, n_q, dim), None
    if kwargs.get("prefill_causal") and q_len == kv_len:  # the decoder found no padding: the mask is causal
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling,
                                             enable_gqa=n_kv != n_q)
        return out.transpose(1, 2).contiguous(), None
    if n_kv != n_q:
        key = key.repeat_interleave(n_q // n_kv, dim=1)
        value = value.repeat_interleave(n_q // n_kv, dim=1)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_NAME, grouped_attention)
