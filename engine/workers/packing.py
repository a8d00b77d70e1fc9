"""Sequence packing without padding (`use_remove_padding`): a micro-batch's valid tokens run as one row.

A micro-batch laid out as [left-padded prompt | right-padded response] wastes the forward on its padding
columns. Packed, the valid tokens (attention_mask == 1) of all rows are concatenated into one row [1, T];
each token keeps its own position id (so RoPE sees the same positions as in the padded layout), and
attention stays inside each sequence: cumulative sequence lengths (`cu_seqlens`, FlashAttention's
convention) travel from the model's forward down to the attention function as transformers'
`cu_seq_lens_q/k` and `max_length_q/k` keyword arguments.

The attention function registered here (`ATTN_NAME`) is SDPA whenever those keywords are absent (so HF
`generate` and any other caller see plain SDPA, masks included); with them it runs variable-length
attention: `torch.nn.attention.varlen.varlen_attn` (FlashAttention) on CUDA in half precision when the
installed torch has it, otherwise an exact emulation that scatters the sequences into a padded
[B, H, Lmax, D] layout and runs causal SDPA on it (O(sum of L^2), never a T x T mask).
"""
from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

ATTN_NAME = "rlstudio_varlen"


# ---- packing: padded [B, L] ↔ one packed row [1, T] ------------------------------------------------------
def packed_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> dict:
    """Model kwargs for the packed row: the valid tokens of every row in order, their position ids, and
    the sequence boundaries for the attention function (max length as an int: no device sync per layer)."""
    valid = attention_mask.bool()
    lens = valid.sum(-1)
    cu = F.pad(lens.cumsum(0), (1, 0)).to(torch.int32)
    max_len = int(lens.max())
    total = input_ids.new_ones(1, int(cu[-1]))
    return {"input_ids": input_ids[valid][None], "position_ids": position_ids[valid][None],
            # all ones: transformers builds no mask for it (plain causal), the attention function splits rows
            "attention_mask": total,
            "cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": max_len, "max_length_k": max_len}


def response_sources(attention_mask: torch.Tensor, resp_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(valid response tokens [B, R] bool, packed index [N] of the token that predicts each of them).

    In the padded layout response token j of a row is predicted by the column before it; packed, by that
    column's token's index in the packed row. N = number of valid response tokens, in row-major order."""
    valid = attention_mask.bool()
    packed_index = valid.flatten().cumsum(0).view_as(valid) - 1  # index in the packed row of each valid token
    width = valid.shape[1]
    resp_valid = valid[:, width - resp_len:]
    before = packed_index[:, width - resp_len - 1:width - 1]
    return resp_valid, before[resp_valid]


def unpack_response(values: torch.Tensor, resp_valid: torch.Tensor) -> torch.Tensor:
    """[N] per valid response token → [B, R] with zeros at padding (differentiable)."""
    out = values.new_zeros(resp_valid.shape)
    return out.masked_scatter(resp_valid, values)


# ---- attention -------------------------------------------------------------------------------------------
def _find_varlen():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn, frozenset(inspect.signature(varlen_attn).parameters)


_VARLEN = _find_varlen()  # looked up once at import: nothing to trace when decoder layers are torch.compile'd


def torch_varlen():
    """(varlen_attn, its keyword names) when the installed torch has it, else None."""
    return _VARLEN


def _varlen_kwargs(params: frozenset, scaling: float | None, gqa: bool) -> dict | None:
    """Keyword arguments for a causal, scaled varlen_attn call across torch versions (2.10 took is_causal,
    2.11+ a window); None when this version cannot express the call."""
    kw = {}
    if "window_size" in params:
        kw["window_size"] = (-1, 0)
    elif "is_causal" in params:
        kw["is_causal"] = True
    else:
        return None
    if scaling is not None:
        if "scale" not in params:
            return None
        kw["scale"] = scaling
    if gqa and "enable_gqa" in params:
        kw["enable_gqa"] = True
    return kw


def flash_varlen(q, k, v, cu: torch.Tensor, max_len: int, scaling: float | None):
    """q [T, Hq, D], k/v [T, Hkv, D] → [T, Hq, D] with torch's varlen FlashAttention, or None if unavailable."""
    if _VARLEN is None or not q.is_cuda or q.dtype not in (torch.float16, torch.bfloat16):
        return None
    fn, params = _VARLEN
    gqa = q.shape[1] != k.shape[1]
    kw = _varlen_kwargs(params, scaling, gqa)
    if kw is None:
        return None
    if gqa and "enable_gqa" not in kw:  # an older varlen_attn: give every query head its KV head
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    return fn(q, k, v, cu, cu, max_len, max_len, **kw)


def token_slots(cu: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sequence index, offset inside the sequence) of each of the `total` packed tokens."""
    lens = (cu[1:] - cu[:-1]).long()
    seq = torch.repeat_interleave(torch.arange(len(lens), device=cu.device), lens, output_size=total)
    offset = torch.arange(total, device=cu.device) - cu[:-1].long()[seq]
    return seq, offset


def padded_varlen(q, k, v, cu: torch.Tensor, max_len: int, scaling: float | None, dropout: float = 0.0):
    """Exact emulation of causal varlen attention: q [T, Hq, D], k/v [T, Hkv, D] → [T, Hq, D].

    Each sequence goes into its own row of a [B, Lmax] layout, right-padded: with a causal mask a valid
    query only sees keys at or before it, all of its own sequence, so no padding mask is needed."""
    seq, offset = token_slots(cu, q.shape[0])
    n_seq = cu.numel() - 1

    def scatter(x):  # [T, H, D] → [B, H, Lmax, D]
        out = x.new_zeros(n_seq, max_len, x.shape[1], x.shape[2])
        return out.index_put((seq, offset), x).transpose(1, 2)

    out = F.scaled_dot_product_attention(scatter(q), scatter(k), scatter(v), dropout_p=dropout, is_causal=True,
                                         scale=scaling, enable_gqa=q.shape[1] != k.shape[1])
    return out.transpose(1, 2)[seq, offset]


def varlen_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                     **kwargs):
    """transformers attention function: SDPA without `cu_seq_lens_q`; with it, causal attention inside each
    packed sequence. query [1, Hq, T, D], key/value [1, Hkv, T, D] → ([1, T, Hq, D], None)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    if kwargs.get("sliding_window") is not None:
        raise ValueError("use_remove_padding: sliding-window attention layers cannot be packed; "
                         "set use_remove_padding=False for this model")
    cu_k = kwargs.get("cu_seq_lens_k")
    if query.shape[0] != 1 or not (cu_k is None or cu_k is cu or torch.equal(cu_k, cu)):
        raise ValueError("packed attention expects one packed row with the same query and key sequences")
    max_len = int(kwargs.get("max_length_q") or int((cu[1:] - cu[:-1]).max()))
    q, k, v = (x[0].transpose(0, 1).contiguous() for x in (query, key, value))  # [T, H, D]
    out = None if dropout else flash_varlen(q, k, v, cu, max_len, scaling)
    if out is None:
        out = padded_varlen(q, k, v, cu, max_len, scaling, dropout)
    return out[None], None


def register() -> None:
    """Register the attention function, and SDPA's mask builder under its name (without one transformers
    would build no padding mask at all for an unknown implementation)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_NAME, varlen_attention)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


def check_packable(model_cls, config, key: str) -> None:
    """Fail loudly where packing would silently be wrong (attention that ignores cu_seqlens)."""
    fix = f"set {key}=False"
    if not getattr(model_cls, "_supports_attention_backend", False):
        raise ValueError(f"{key}=True: {model_cls.__name__} does not route attention through transformers' "
                         f"AttentionInterface, so sequences cannot be packed without padding; {fix}")
    layer_types = getattr(config, "layer_types", None) or []
    if getattr(config, "use_sliding_window", False) and "sliding_attention" in layer_types:
        raise ValueError(f"{key}=True: sliding-window attention (config.use_sliding_window) is not supported "
                         f"with packed sequences; {fix} or disable the sliding window")
