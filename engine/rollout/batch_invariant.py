"""Batch-invariant numerics for exact mode (`actor_rollout_ref.rollout.exact=True`, docs/exact-mode.md).

A kernel's reduction order usually depends on the shape it is called with: a matmul of 1 row runs as a
matrix-vector product, a logsumexp over one row of a big vocabulary is split across threads, attention over a padded
row sums over a different number of keys. So the static decoder (one token per row, a KV cache) and the actor's
forward (whole sequences, padded or packed, in micro-batches) give slightly different log-probs for the same tokens.

Here every reduction runs as a call of ONE fixed shape, whatever the batch:
- row-wise ops (every nn.Linear, every RMSNorm, the log-softmax over the vocabulary) run on tiles of exactly
  `ROW_TILE` rows (the last tile zero-padded): a kernel called with the same shape takes the same path, and a row's
  result does not depend on the other rows of its tile;
- attention, per query, goes over that query's own keys in tiles of `KEY_TILE` positions counted from the start of
  its sequence (so left padding and packing do not move the tiles), combined tile after tile in order with an online
  softmax; its dot products and sums are fixed binary trees of elementwise adds (`tree_sum`), which no batch shape
  or backend reduction kernel can reorder. A tile past a query's last key (a longer neighbour) adds an exact zero:
  max(m, -inf) = m, exp(0) = 1, + 0.

The same functions serve the decode step and the training forward, so their log-probs are bit-equal (torch.equal).
The cost is the padding of the last tile and, for attention, a gather of each query's key tiles instead of a fused
kernel (docs/exact-mode.md says what it costs).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


ATTN_NAME = "rlstudio_exact"
ROW_TILE = 64  # rows per call of every row-wise op
KEY_TILE = 64  # key positions per attention tile, counted from the start of the query's sequence


# ---- row tiles ---------------------------------------------------------------------------------------------
def tiled_rows(fn, x: torch.Tensor) -> torch.Tensor:
    """fn applied to x [..., K] as calls on exactly ROW_TILE rows each; returns [..., N]."""
    lead = x.shape[:-1]
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[0]
    pad = (-n) % ROW_TILE
    if pad or n == 0:
        rows = torch.cat([rows, rows.new_zeros(pad or ROW_TILE, rows.shape[1])])
    outs = [fn(rows[i:i + ROW_TILE].contiguous()) for i in range(0, rows.shape[0], ROW_TILE)]
    out = torch.cat(outs)[:n]
    return out.reshape(*lead, out.shape[-1])


def exact_linear(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    weight, bias = module.weight, module.bias
    return tiled_rows(lambda t: F.linear(t, weight, bias), x)


def exact_rms_norm(module, x: torch.Tensor) -> torch.Tensor:
    """transformers' RMSNorm (Qwen2, Llama: x * rsqrt(mean(x^2) + eps) * weight, in fp32), on row tiles."""
    eps = getattr(module, "variance_epsilon", None) or getattr(module, "eps", 1e-6)
    dtype = x.dtype

    def norm(t: torch.Tensor) -> torch.Tensor:
        t = t.to(torch.float32)
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps)

    return module.weight * tiled_rows(norm, x).to(dtype)


def is_rms_norm(module: torch.nn.Module) -> bool:
    return type(module).__name__.endswith("RMSNorm") and getattr(module, "weight", None) is not None


def make_exact(model: torch.nn.Module) -> torch.nn.Module:
    """Route every nn.Linear and RMSNorm of `model` through the row-tiled ops (attention: load the model with
    attn_implementation=ATTN_NAME after `register()`). Idempotent; the module keeps its parameters."""
    for mod in model.modules():
        if getattr(mod, "_rlstudio_exact", False):
            continue
        if isinstance(mod, torch.nn.Linear):
            mod.forward = (lambda m: lambda x: exact_linear(m, x))(mod)
        elif is_rms_norm(mod):
            mod.forward = (lambda m: lambda x: exact_rms_norm(m, x))(mod)
        else:
            continue
        mod._rlstudio_exact = True
    return model


def unsupported_modules(model: torch.nn.Module) -> list[str]:
    """Normalisation layers make_exact does not know (a LayerNorm model): exact mode refuses such a model."""
    return sorted({type(m).__name__ for m in model.modules()
                   if "Norm" in type(m).__name__ and not is_rms_norm(m)
                   and not type(m).__name__.endswith(("Model", "ForCausalLM"))})


# ---- attention ---------------------------------------------------------------------------------------------
def key_ranges(attention_mask, bsz: int, q_len: int, k_len: int, device, cu_seqlens=None):
    """(first key, last key [B, Lq], mask [B, Lq, W] bool or None): each query attends to the keys first..last of
    its row that the mask allows (all of them without a mask). Tiles are counted from `first`, the start of the
    query's sequence, so left padding and packing do not move them."""
    if cu_seqlens is not None:  # packed: token i of the sequence starting at cu[j] sees cu[j]..i
        idx = torch.arange(q_len, device=device)
        cu = cu_seqlens.to(device=device, dtype=torch.long)
        seq = torch.searchsorted(cu[1:], idx, right=True)
        return cu[seq][None].expand(bsz, q_len), idx[None].expand(bsz, q_len), None
    if attention_mask is None:  # plain causal, queries are the last q_len keys
        end = torch.arange(k_len - q_len, k_len, device=device)[None].expand(bsz, q_len)
        return torch.zeros_like(end), end, None
    mask = attention_mask
    if mask.dtype != torch.bool:
        mask = mask > torch.finfo(mask.dtype).min / 2
    if mask.dim() == 4:
        if mask.shape[1] != 1:
            raise ValueError("exact attention: a per-head attention mask is not supported")
        mask = mask[:, 0]
    mask = mask.expand(bsz, q_len, mask.shape[-1])
    width = mask.shape[-1]
    first = mask.int().argmax(-1)
    last = width - 1 - mask.flip(-1).int().argmax(-1)
    return first, last, mask


def tree_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over `dim` as a fixed binary tree of elementwise adds (halves added, zero-padded to a power of two): the
    order depends on the length of `dim` only, never on the other dimensions or on the backend's reduction kernels."""
    x = x.movedim(dim, -1)
    n = x.shape[-1]
    width = 1 << max(0, (n - 1).bit_length())
    if width != n:
        x = F.pad(x, (0, width - n))
    while width > 1:
        width //= 2
        x = x[..., :width] + x[..., width:]
    return x[..., 0]


ROWS_PER_CALL = 4096  # queries attended together (memory only: every reduction below is a tree_sum or a max)


def _attend_rows(q, base, first, last, steps: int, mask_rows, mask, keys, values, scaling: float):
    """Queries [R, D] (fp32) over their keys: rows base + first .. base + last of keys/values [N, D], those that
    mask[mask_rows] allows when there is a mask; key tiles of KEY_TILE from `first`, in order."""
    offsets = torch.arange(KEY_TILE, device=q.device)
    best = torch.full((q.shape[0],), float("-inf"), device=q.device)
    total = torch.zeros(q.shape[0], device=q.device)
    acc = torch.zeros_like(q)
    for step in range(steps):
        pos = first[:, None] + step * KEY_TILE + offsets  # [R, C]
        ok = pos <= last[:, None]
        pos = torch.minimum(pos, last[:, None])
        if mask is not None:
            ok &= mask[mask_rows[:, None], pos]
        index = base[:, None] + pos
        k = keys[index].float()  # [R, C, D]
        v = values[index].float().masked_fill(~ok[..., None], 0.0)
        scores = (tree_sum(q[:, None, :] * k, -1) * scaling).masked_fill(~ok, float("-inf"))
        new_best = torch.maximum(best, scores.max(-1).values)
        p = torch.exp(scores - new_best[:, None])
        keep = torch.exp(best - new_best)
        total = total * keep + tree_sum(p, -1)
        acc = acc * keep[:, None] + tree_sum(p[..., None] * v, 1)
        best = new_best
    return acc / total[:, None]


def _exact_forward(query, key, value, first, last, mask, scaling: float) -> torch.Tensor:
    """[B, Hq, Lq, D] in query's dtype; first/last [B, Lq], mask [B, Lq, W] or None (key_ranges)."""
    bsz, n_q, q_len, dim = query.shape
    n_kv, k_len = key.shape[1], key.shape[2]
    # one row per (b, head, query): its key range, its mask row, where its KV head's keys start in the flat K/V
    dev = query.device
    b = torch.arange(bsz, device=dev)[:, None, None]
    head = torch.arange(n_q, device=dev)[None, :, None]
    i = torch.arange(q_len, device=dev)[None, None, :]
    shape = (bsz, n_q, q_len)
    base = ((b * n_kv + head // (n_q // n_kv)) * k_len).expand(shape).reshape(-1)
    mask_rows = (b * q_len + i).expand(shape).reshape(-1)
    first = first[:, None, :].expand(shape).reshape(-1)
    last = last[:, None, :].expand(shape).reshape(-1)
    flat_mask = mask.reshape(bsz * q_len, -1) if mask is not None else None
    q = query.float().reshape(-1, dim)
    keys, values = key.reshape(-1, dim), value.reshape(-1, dim)
    # tiles past a query's last key add exact zeros, so every query may run the call's largest count (one host sync)
    steps = int(((last - first) // KEY_TILE).max()) + 1 if q.shape[0] else 0
    out = torch.cat([_attend_rows(q[j:j + ROWS_PER_CALL], base[j:j + ROWS_PER_CALL], first[j:j + ROWS_PER_CALL],
                                  last[j:j + ROWS_PER_CALL], steps, mask_rows[j:j + ROWS_PER_CALL], flat_mask, keys,
                                  values, scaling)
                     for j in range(0, q.shape[0], ROWS_PER_CALL)] or [q])
    return out.reshape(bsz, n_q, q_len, dim).to(query.dtype)


def _dense_allowed(first, last, mask, k_len: int) -> torch.Tensor:
    """[B, 1, Lq, Lk] bool: the keys each query attends to (for the backward's SDPA)."""
    j = torch.arange(k_len, device=first.device)
    allowed = (j >= first[..., None]) & (j <= last[..., None])
    if mask is not None:
        allowed &= F.pad(mask, (0, k_len - mask.shape[-1]), value=False)
    return allowed[:, None]


class _ExactAttention(torch.autograd.Function):
    """Forward: the batch-invariant attention, keeping nothing per key tile. Backward: the gradient of the same
    function through SDPA with the equivalent dense mask (only the forward's values must be bit-exact; its
    gradient is the same mathematics, rounded differently), so training memory is SDPA's, not the gathers'."""

    @staticmethod
    def forward(ctx, query, key, value, first, last, mask, scaling: float):
        ctx.save_for_backward(query, key, value, first, last, mask if mask is not None else torch.empty(0))
        ctx.has_mask, ctx.scaling = mask is not None, scaling
        return _exact_forward(query, key, value, first, last, mask, scaling)

    @staticmethod
    def backward(ctx, grad):
        query, key, value, first, last, mask = ctx.saved_tensors
        allowed = _dense_allowed(first, last, mask if ctx.has_mask else None, key.shape[2])
        with torch.enable_grad():
            q, k, v = (t.detach().requires_grad_() for t in (query, key, value))
            group = q.shape[1] // k.shape[1]
            out = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                                 attn_mask=allowed, scale=ctx.scaling)
            gq, gk, gv = torch.autograd.grad(out, (q, k, v), grad)
        return gq, gk, gv, None, None, None, None


def exact_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention function: query [B, Hq, Lq, D], key/value [B, Hkv, Lk, D] (a decode step's static
    cache included), attention_mask bool 4-D / None / packed (cu_seq_lens_q). Returns ([B, Lq, Hq, D], None)."""
    dim, k_len = query.shape[-1], key.shape[2]
    scaling = dim ** -0.5 if scaling is None else scaling
    first, last, mask = key_ranges(attention_mask, query.shape[0], query.shape[2], k_len, query.device,
                                   kwargs.get("cu_seq_lens_q"))
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        out = _ExactAttention.apply(query, key, value, first, last, mask, scaling)
    else:
        out = _exact_forward(query, key, value, first, last, mask, scaling)
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """The attention function under ATTN_NAME, with SDPA's mask builder (a 4-D mask passed in is used as it is)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_NAME, exact_attention)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


# ---- log-probs of the sampled tokens --------------------------------------------------------------------------
def _tile_forward(tile: torch.Tensor, labels: torch.Tensor, inv_temp: float, with_entropy: bool):
    """(logsumexp, label log-prob, entropy or None) of ROW_TILE rows of logits, fp32 (engine/algos/logprob.py's
    math, which this layer may not import)."""
    x = tile.float() * inv_temp
    lse = torch.logsumexp(x, dim=-1)
    lp = x.gather(-1, labels[:, None]).squeeze(-1) - lse
    if not with_entropy:
        return lse, lp, None
    probs = torch.exp(x - lse[:, None])
    return lse, lp, lse - torch.where(probs > 0, probs * x, torch.zeros_like(probs)).sum(-1)


def _tile_backward(tile, labels, lse, entropy, g_lp, g_ent, inv_temp: float):
    """d log p_y / d l_j = 1[j == y] - p_j; dH / d l_j = -p_j (l_j - E_p[l]), E_p[l] = lse - H; times 1/T."""
    x = tile.float() * inv_temp
    probs = torch.exp(x - lse[:, None])
    grad = torch.zeros_like(probs)
    if g_ent is not None:
        centred = x - (lse - entropy)[:, None]
        grad = grad - torch.where(probs > 0, probs * centred, torch.zeros_like(probs)) * g_ent[:, None]
    if g_lp is not None:
        onehot = torch.arange(x.shape[-1], device=x.device)[None, :] == labels[:, None]
        grad = grad + (onehot.float() - probs) * g_lp[:, None]
    return (grad * inv_temp).to(tile.dtype)


class _ExactLogProbs(torch.autograd.Function):
    """The log-softmax of the label on tiles of exactly ROW_TILE rows: the same numbers for a row whatever the
    number of rows (the decode step's B rows, the actor's micro-batch). Backward by hand, tile by tile, so that no
    fp32 copy of the logits is kept for it."""

    @staticmethod
    def forward(ctx, logits, labels, inv_temp: float, with_entropy: bool):
        n = logits.shape[0]
        pad = (-n) % ROW_TILE or (ROW_TILE if n == 0 else 0)
        padded = torch.cat([logits, logits.new_zeros(pad, logits.shape[1])]) if pad else logits
        padded_labels = torch.cat([labels, labels.new_zeros(pad)]) if pad else labels
        lses, lps, ents = [], [], []
        for i in range(0, padded.shape[0], ROW_TILE):
            lse, lp, ent = _tile_forward(padded[i:i + ROW_TILE].contiguous(), padded_labels[i:i + ROW_TILE],
                                          inv_temp, with_entropy)
            lses.append(lse)
            lps.append(lp)
            if with_entropy:
                ents.append(ent)
        lse, lp = torch.cat(lses)[:n], torch.cat(lps)[:n]
        entropy = torch.cat(ents)[:n] if with_entropy else torch.empty(0, device=logits.device)
        ctx.save_for_backward(logits, labels, lse, entropy)
        ctx.inv_temp = inv_temp
        ctx.set_materialize_grads(False)
        return lp, entropy

    @staticmethod
    def backward(ctx, grad_lp, grad_ent):
        logits, labels, lse, entropy = ctx.saved_tensors
        if grad_lp is None and grad_ent is None:
            return None, None, None, None
        grad = torch.empty_like(logits)
        for i in range(0, logits.shape[0], ROW_TILE):
            s = slice(i, i + ROW_TILE)
            grad[s] = _tile_backward(logits[s], labels[s], lse[s], entropy[s] if grad_ent is not None else None,
                                      grad_lp[s].float() if grad_lp is not None else None,
                                      grad_ent[s].float() if grad_ent is not None else None, ctx.inv_temp)
        return grad, None, None, None


def exact_logprobs_and_entropy(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0,
                               calc_entropy: bool = True):
    """logprob.logprobs_and_entropy's results, batch-invariant: logits [..., V], labels [...]."""
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"labels shape {tuple(labels.shape)} does not match logits {tuple(logits.shape)}[:-1]")
    flat = logits.reshape(-1, logits.shape[-1])
    flat_labels = labels.reshape(-1).to(device=logits.device, dtype=torch.long)
    lp, ent = _ExactLogProbs.apply(flat, flat_labels, 1.0 / float(temperature or 1.0), calc_entropy)
    return lp.reshape(labels.shape), (ent.reshape(labels.shape) if calc_entropy else None)
