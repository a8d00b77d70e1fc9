"""One-kernel decode attention for the static-cache decoder (engine/rollout/static_decoder.py), GPU only.

A decode step has one query per sequence. The eager grouped-query path there is six kernels per layer (scores
matmul, fp32 cast and scaling, masking, softmax, cast back, output matmul), all over the whole static cache:
every step reads all `prompt + response` key/value positions, also the ones no token has been written to yet.
This Triton kernel does the step in one launch per layer: one program per (sequence, KV head) streams the
key/value positions below the current length in blocks, with an online softmax in fp32 (scores never leave
the chip), the query heads that share the KV head (Qwen2.5-0.5B: 7) as the rows of one small matrix product.

The current length is read from a device tensor inside the kernel (`n_keys`), so a CUDA graph captured once
replays correctly at every step while the number of positions read grows with the answer: the first answer
token of W1 reads 257 positions, not 512.

On by default on GPU (`actor_rollout_ref.rollout.engine_kwargs.hf.triton_attention`; timed in
engine/bench/README.md): checked on CPU through Triton's interpreter and, on first use on a GPU, against the eager
path (a disagreement or a compile failure warns and keeps the eager path); tests/unit/test_decode_attention.py has
the CUDA checks.

Masking: key position j of row b counts when j < n_keys and mask[b, j] (the same boolean mask the eager path
gets: prompt padding is False). Each row has at least one valid key (its own newest token).
"""
from __future__ import annotations

import torch

try:  # Triton ships with CUDA builds of torch; without it the eager path is used
    import triton
    import triton.language as tl
except Exception:  # noqa: BLE001
    triton = None

BLOCK_KEYS = 64


if triton is not None:
    @triton.jit
    def _decode_attention_kernel(Q, K, V, M, O, N, scale,
                                 s_qb, s_qh, s_kb, s_kh, s_kl, s_vb, s_vh, s_vl, s_mb, s_ob, s_oh,
                                 GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, DIM: tl.constexpr,
                                 BLOCK: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)  # KV head; query heads h*GROUP .. h*GROUP+GROUP-1 read it (repeat_kv's order)
        n = tl.load(N).to(tl.int32)
        g = tl.arange(0, GROUP_PAD)
        d = tl.arange(0, DIM)
        g_ok = g < GROUP
        q = tl.load(Q + b * s_qb + (h * GROUP + g)[:, None] * s_qh + d[None, :], mask=g_ok[:, None], other=0.0)
        m_i = tl.full([GROUP_PAD], -1.0e30, tl.float32)
        l_i = tl.zeros([GROUP_PAD], tl.float32)
        acc = tl.zeros([GROUP_PAD, DIM], tl.float32)
        k_base = K + b * s_kb + h * s_kh
        v_base = V + b * s_vb + h * s_vh
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            in_range = offs < n
            ok = tl.load(M + b * s_mb + offs, mask=in_range, other=0) != 0
            ok = ok & in_range
            k = tl.load(k_base + offs[:, None] * s_kl + d[None, :], mask=in_range[:, None], other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale                                  # [GROUP_PAD, BLOCK] fp32
            s = tl.where(ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + offs[:, None] * s_vl + d[None, :], mask=in_range[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        out = acc / l_i[:, None]
        tl.store(O + b * s_ob + (h * GROUP + g)[:, None] * s_oh + d[None, :], out.to(O.dtype.element_ty),
                 mask=g_ok[:, None])


def available() -> bool:
    return triton is not None


def decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                     n_keys: torch.Tensor, scaling: float) -> torch.Tensor:
    """query [B, Hq, 1, D]; key/value [B, Hkv, L, D] (last dim contiguous); mask bool [B, Lm] or [B, 1, 1, Lm]
    (Lm ≥ n_keys); n_keys: 0-d integer tensor on the device (positions 0 .. n_keys-1 are looked at).
    Returns [B, 1, Hq, D] in the query's dtype (the layout transformers' attention functions return)."""
    bsz, n_q, q_len, dim = query.shape
    n_kv = key.shape[1]
    if q_len != 1 or n_q % n_kv or dim & (dim - 1) or dim < 16:
        raise ValueError(f"decode_attention: unsupported shapes query {tuple(query.shape)} key {tuple(key.shape)}")
    if query.stride(-1) != 1 or key.stride(-1) != 1 or value.stride(-1) != 1:
        raise ValueError("decode_attention: the head dimension must be contiguous")
    return torch.ops.rlstudio.decode_attention(query, key, value, mask.reshape(bsz, mask.shape[-1]), n_keys,
                                               float(scaling))


if triton is not None:
    # a custom operator: torch.compile (the static decoder's `compile_step`) sees one opaque call with a known
    # output shape instead of tracing into the Triton launch
    @torch.library.custom_op("rlstudio::decode_attention", mutates_args=())
    def _decode_attention_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                             n_keys: torch.Tensor, scaling: float) -> torch.Tensor:
        bsz, n_q, _, dim = query.shape
        group = n_q // key.shape[1]
        if mask.stride(-1) != 1:
            mask = mask.contiguous()
        out = torch.empty(bsz, 1, n_q, dim, dtype=query.dtype, device=query.device)
        _decode_attention_kernel[(bsz, key.shape[1])](
            query, key, value, mask.view(torch.uint8), out, n_keys, scaling,
            query.stride(0), query.stride(1), key.stride(0), key.stride(1), key.stride(2),
            value.stride(0), value.stride(1), value.stride(2), mask.stride(0), out.stride(0), out.stride(2),
            GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), DIM=dim, BLOCK=BLOCK_KEYS)
        return out

    @_decode_attention_op.register_fake
    def _(query, key, value, mask, n_keys, scaling):
        bsz, n_q, _, dim = query.shape
        return query.new_empty(bsz, 1, n_q, dim)
