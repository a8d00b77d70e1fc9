"""Label log-probs and entropies from logits without a full-batch fp32 log_softmax: `logprobs_and_entropy`.

Logits are [..., V] in any float dtype (usually bf16). A naive `log_softmax(logits.float())` makes an fp32
copy of the whole [B, T, V] tensor (and autograd keeps it for backward). Here the work runs over chunks
of `chunk_size` token positions: each chunk is upcast to fp32, reduced, and dropped. Backward is written
by hand for the same reason, recomputing the softmax per chunk from the saved logits and per-token
logsumexp. Outputs are fp32; gradients come back in the logits' dtype. Only first derivatives are
supported.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

DEFAULT_CHUNK_SIZE = 512  # token positions per chunk: 512 x 152k vocab x 4 bytes ~ 300 MB of fp32


def _chunks(n: int, chunk_size: int):
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    for start in range(0, n, chunk_size):
        yield start, min(start + chunk_size, n)


def _softmax_times_logits(probs: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    # p * l with p == 0 giving 0, so -inf logits (masked vocabulary) do not turn into 0 * -inf = NaN.
    return torch.where(probs > 0, probs * logits, torch.zeros_like(probs))


def _chunk_forward(chunk: torch.Tensor, labels: torch.Tensor, inv_temp: float, with_entropy: bool):
    """(logsumexp, label log-prob, entropy or None) of one chunk of (unscaled) logits, all fp32."""
    x = chunk.float() * inv_temp
    lse = torch.logsumexp(x, dim=-1)
    lp = x.gather(-1, labels[:, None]).squeeze(-1) - lse
    if not with_entropy:
        return lse, lp, None
    probs = torch.exp(x - lse[:, None])
    return lse, lp, lse - _softmax_times_logits(probs, x).sum(-1)


def _chunk_backward(chunk, labels, lse, entropy, g_lp, g_ent, inv_temp: float):
    """Gradient w.r.t. one chunk of logits, in their dtype: d log p_y / d l_j = 1[j == y] - p_j and
    dH / d l_j = -p_j (l_j - E_p[l]) with E_p[l] = lse - H, times 1/T for the temperature."""
    x = chunk.float() * inv_temp
    probs = torch.exp(x - lse[:, None])
    grad = torch.zeros_like(probs)
    if g_ent is not None:
        grad = grad - _softmax_times_logits(probs, x - (lse - entropy)[:, None]) * g_ent[:, None]
    if g_lp is not None:
        onehot = torch.arange(x.shape[-1], device=x.device)[None, :] == labels[:, None]
        grad = grad + (onehot.float() - probs) * g_lp[:, None]
    return (grad * inv_temp).to(chunk.dtype)


_COMPILED: dict = {}
# Compiled kernels fuse the fp32 math, so nothing vocabulary-sized is materialised but their bf16 output: a chunk
# can then be a whole micro-batch (fewer launches, no copy into the result). The cap keeps rows x vocabulary
# below 2^31 for 32-bit indexing with vocabularies up to ~260k.
COMPILED_CHUNK_ROWS = 8192


def _compiled_ready(device: torch.device) -> bool:
    return device.type == "cuda" and not _COMPILED.get("failed")


def _kernels(device: torch.device):
    """On CUDA the chunk math goes through torch.compile: one fused kernel reads the bf16 logits once instead
    of a dozen fp32 passes. Elsewhere (or if compiling fails) the same functions run eagerly."""
    if not _compiled_ready(device):
        return _chunk_forward, _chunk_backward
    if "fwd" not in _COMPILED:
        # the vocabulary stays a compile-time constant (better reduction code); only the row count is symbolic
        _COMPILED["fwd"] = torch.compile(_chunk_forward)
        _COMPILED["bwd"] = torch.compile(_chunk_backward)
    return _COMPILED["fwd"], _COMPILED["bwd"]


def _run(kind: str, device: torch.device, *args):
    fwd, bwd = _kernels(device)
    fn = fwd if kind == "fwd" else bwd
    if fn is _chunk_forward or fn is _chunk_backward:
        return fn(*args)
    for a in args:
        if isinstance(a, torch.Tensor) and a.dim() > 0:
            torch._dynamo.maybe_mark_dynamic(a, 0)  # one kernel for every chunk length
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - a compiler problem must not stop training: run eagerly
        import warnings

        warnings.warn(f"log-prob kernels: torch.compile failed ({type(exc).__name__}: {exc}); running eagerly")
        _COMPILED["failed"] = True
        return (_chunk_forward if kind == "fwd" else _chunk_backward)(*args)


class _LogProbEntropy(torch.autograd.Function):
    """Both outputs from one pass per chunk (one read of the logits, one logsumexp), temperature folded in (no
    scaled copy of the logits), and one softmax per chunk in backward for whichever outputs get a gradient."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, inv_temp: float, chunk_size: int | None,
                with_entropy: bool):
        n = logits.shape[0]
        if chunk_size is None:
            chunk_size = COMPILED_CHUNK_ROWS if _compiled_ready(logits.device) else DEFAULT_CHUNK_SIZE
        if n <= chunk_size:  # one chunk: the kernels' outputs are the results, nothing to copy
            lse, out, entropy = _run("fwd", logits.device, logits, labels, inv_temp, with_entropy)
            if entropy is None:
                entropy = torch.empty(0, dtype=torch.float32, device=logits.device)
            ctx.save_for_backward(logits, labels, lse, entropy)
            ctx.inv_temp, ctx.chunk_size = inv_temp, chunk_size
            ctx.set_materialize_grads(False)
            return out, entropy
        out = torch.empty(n, dtype=torch.float32, device=logits.device)
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        entropy = torch.empty(n if with_entropy else 0, dtype=torch.float32, device=logits.device)
        for start, end in _chunks(n, chunk_size):
            c_lse, c_lp, c_ent = _run("fwd", logits.device, logits[start:end], labels[start:end], inv_temp,
                                      with_entropy)
            lse[start:end] = c_lse
            out[start:end] = c_lp
            if with_entropy:
                entropy[start:end] = c_ent
        ctx.save_for_backward(logits, labels, lse, entropy)
        ctx.inv_temp, ctx.chunk_size = inv_temp, chunk_size
        ctx.set_materialize_grads(False)
        return out, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_lp, grad_ent):
        logits, labels, lse, entropy = ctx.saved_tensors
        if grad_lp is None and grad_ent is None:
            return None, None, None, None, None
        if logits.shape[0] <= ctx.chunk_size:
            grad = _run("bwd", logits.device, logits, labels, lse, entropy if grad_ent is not None else None,
                        grad_lp.float() if grad_lp is not None else None,
                        grad_ent.float() if grad_ent is not None else None, ctx.inv_temp)
            return grad, None, None, None, None
        grad_logits = torch.empty_like(logits)
        for start, end in _chunks(logits.shape[0], ctx.chunk_size):
            grad_logits[start:end] = _run(
                "bwd", logits.device, logits[start:end], labels[start:end], lse[start:end],
                entropy[start:end] if grad_ent is not None else None,
                grad_lp[start:end].float() if grad_lp is not None else None,
                grad_ent[start:end].float() if grad_ent is not None else None, ctx.inv_temp)
        return grad_logits, None, None, None, None


def logprobs_and_entropy(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0,
                         calc_entropy: bool = True, chunk_size: int | None = None):
    """(log softmax(logits / T)[label], entropy of softmax(logits / T) or None), fp32, in one chunked pass:
    logits [..., V] (any float dtype, left unscaled), labels [...]. `chunk_size` rows per pass; default
    DEFAULT_CHUNK_SIZE eagerly, COMPILED_CHUNK_ROWS with the compiled kernels."""
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"labels shape {tuple(labels.shape)} does not match logits {tuple(logits.shape)}[:-1]")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_labels = labels.reshape(-1).to(device=logits.device, dtype=torch.long)
    lp, ent = _LogProbEntropy.apply(flat_logits, flat_labels, 1.0 / float(temperature), chunk_size, calc_entropy)
    return lp.reshape(labels.shape), (ent.reshape(labels.shape) if calc_entropy else None)
