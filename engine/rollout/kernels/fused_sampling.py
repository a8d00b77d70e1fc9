"""One-kernel sampling for the static-cache decoder (engine/rollout/static_decoder.py), GPU only (and Triton's
interpreter on CPU, for tests).

The decoder's torch sampling makes a fp32 copy of the [rows, vocabulary] logits, a logsumexp pass, a fp32
exponential-noise tensor for the whole batch, its log, a subtraction, an argmax and a gather: for W1's 512 rows ×
151,936 ids that is ~2.8 GB of memory traffic per token, about as much as the decode step's weights and KV cache.
Here one program per row streams its bf16 logits once and keeps, in registers, the running logsumexp (for the
token's log-prob under the temperature-scaled distribution, before any masking) and the running Gumbel-max
winner; nothing of vocabulary size is written.

Noise: Gumbel-max with E ~ Exp(1) drawn by Philox from (call seed; counters = vocabulary position, the row's index
in the *original* batch, the decode step). A row's tokens therefore depend on its own counters only: dropping
finished rows (compaction) changes no token, as with the torch path's full-batch noise. E is built from 64 random
bits so that its small values, which decide the argmax, are resolved down to 2^-64 (torch's float32 exponential
stops near 6e-8; the Gumbel tail is then cut at 16.6 instead of 44).

Masking supported: the end tokens while fewer than `min_new_tokens` are produced (read from the step counter on the
device, so one captured CUDA graph serves every step). top-k / top-p stay on the torch path.
"""
from __future__ import annotations

import torch

try:  # Triton ships with CUDA builds of torch; without it the torch path is used
    import triton
    import triton.language as tl
except Exception:  # noqa: BLE001
    triton = None

# vocabulary positions per half-block; a block is two halves, whose four random words come from one Philox call
BLOCK = 1024


def available() -> bool:
    return triton is not None


if triton is not None:
    @triton.jit
    def _consume(x, offs, h, lo, vocab, ban, EOS, m, s, best_z, best_i, best_x,
                 N_EOS: tl.constexpr, SAMPLE: tl.constexpr, BLOCK: tl.constexpr):
        """Fold one block of (temperature-scaled) logits into the row's running logsumexp and Gumbel-max winner.
        h, lo: two uint32 random words per position (used when SAMPLE)."""
        ok = offs < vocab
        x = tl.where(ok, x, float("-inf"))
        m_new = tl.maximum(m, tl.max(x, 0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
        z = x
        for i in tl.static_range(N_EOS):
            z = tl.where(ban & (offs == tl.load(EOS + i)), float("-inf"), z)
        if SAMPLE:
            # u in [0, 1) with fine resolution near 0; E = -log(1 - u) ~ Exp(1) (≈ u + u²/2 for small u, where
            # 1 - u would round); the winner is argmax(z - log E), a sample of softmax(z)
            u = h.to(tl.float32) * 2.3283064365386963e-10 + lo.to(tl.float32) * 5.421010862427522e-20
            e = tl.where(u < 1e-4, u + 0.5 * u * u, -tl.log(1.0 - u))
            z = z - tl.log(e)
        bz = tl.max(z, 0)
        bi = tl.argmax(z, 0)
        hit = tl.arange(0, BLOCK) == bi
        bx = tl.max(tl.where(hit, x, float("-inf")), 0)
        bo = tl.max(tl.where(hit, offs, 0), 0)
        better = bz > best_z
        return m_new, s, tl.where(better, bz, best_z), tl.where(better, bo, best_i), tl.where(better, bx, best_x)

    @triton.jit
    def _sample_kernel(L, s_l, TOK, LP, ROWS, SEED, STEP, EOS, min_new, vocab, inv_temp,
                       N_EOS: tl.constexpr, SAMPLE: tl.constexpr, BLOCK: tl.constexpr):
        r = tl.program_id(0)
        row = tl.load(ROWS + r).to(tl.uint32)
        k = tl.load(STEP)
        seed = tl.load(SEED)
        ban = k < min_new
        lanes = tl.arange(0, BLOCK)
        zero = (lanes * 0).to(tl.uint32)
        m = tl.full([], -1.0e30, tl.float32)
        s = tl.full([], 0.0, tl.float32)
        best_z = tl.full([], float("-inf"), tl.float32)
        best_i = tl.full([], 0, tl.int32)
        best_x = tl.full([], 0.0, tl.float32)
        base = L + r.to(tl.int64) * s_l
        for it in range(tl.cdiv(vocab, 2 * BLOCK)):
            o0 = it * 2 * BLOCK + lanes
            o1 = o0 + BLOCK
            x0 = tl.load(base + o0, mask=o0 < vocab, other=float("-inf")).to(tl.float32) * inv_temp
            x1 = tl.load(base + o1, mask=o1 < vocab, other=float("-inf")).to(tl.float32) * inv_temp
            if SAMPLE:
                # one Philox call → four words: two per position for the two halves of this block
                a, b, c, d = tl.philox(seed, (it * BLOCK + lanes).to(tl.uint32), zero + row, zero + k.to(tl.uint32),
                                       zero)
            else:
                a, b, c, d = zero, zero, zero, zero
            m, s, best_z, best_i, best_x = _consume(x0, o0, a, b, vocab, ban, EOS, m, s, best_z, best_i, best_x,
                                                    N_EOS, SAMPLE, BLOCK)
            m, s, best_z, best_i, best_x = _consume(x1, o1, c, d, vocab, ban, EOS, m, s, best_z, best_i, best_x,
                                                    N_EOS, SAMPLE, BLOCK)
        tl.store(TOK + r, best_i.to(tl.int64))
        tl.store(LP + r, best_x - (m + tl.log(s)))


def fused_sample(logits: torch.Tensor, *, seed: torch.Tensor, step: torch.Tensor, rows: torch.Tensor,
                 temperature: float = 1.0, do_sample: bool = True, eos: torch.Tensor | None = None,
                 min_new_tokens: int = 0, block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [R, V] (last dim contiguous, any float dtype); seed: 0-d int64 device tensor (the call's); step:
    0-d int64 device tensor (index of the token being produced; a Philox counter and the min-tokens clock);
    rows: int64 [R], each row's index in the call's original batch (its noise stream).
    Returns (tokens [R] int64, log-probs [R] fp32 of each token under softmax(logits / temperature), before the
    end-token mask). Greedy when `do_sample` is false."""
    if logits.dim() != 2 or logits.stride(-1) != 1:
        raise ValueError(f"fused_sample: logits must be [rows, vocab] with a contiguous last dim, got "
                         f"{tuple(logits.shape)} strides {logits.stride()}")
    n_rows, vocab = logits.shape
    device = logits.device
    if eos is None or eos.numel() == 0 or min_new_tokens <= 0:
        eos_t, n_eos = torch.zeros(1, dtype=torch.long, device=device), 0
    else:
        eos_t, n_eos = eos.to(device=device, dtype=torch.long).contiguous(), int(eos.numel())
    tok = torch.empty(n_rows, dtype=torch.long, device=device)
    lp = torch.empty(n_rows, dtype=torch.float32, device=device)
    _sample_kernel[(n_rows,)](logits, logits.stride(0), tok, lp, rows, seed, step, eos_t, int(min_new_tokens),
                              vocab, 1.0 / float(temperature), N_EOS=n_eos, SAMPLE=bool(do_sample), BLOCK=block)
    return tok, lp


def self_check(vocab: int, device: torch.device, dtype: torch.dtype) -> None:
    """Raises unless the kernel agrees with torch on random logits of this vocabulary, device and dtype: greedy
    tokens, the end token held back, and the log-prob of greedy and sampled tokens (the decoder's first-use check)."""
    g = torch.Generator(device=device).manual_seed(0)
    logits = (torch.randn(4, vocab, device=device, generator=g) * 3).to(dtype)
    truth = torch.log_softmax(logits.float() / 0.7, dim=-1)
    eos = truth.argmax(-1)[:1]  # row 0's best token, held back below
    kw = {"seed": torch.tensor(5, device=device), "step": torch.tensor(0, device=device),
          "rows": torch.arange(4, device=device), "temperature": 0.7, "eos": eos, "min_new_tokens": 1}
    greedy, greedy_lp = fused_sample(logits, do_sample=False, **kw)
    sampled, sampled_lp = fused_sample(logits, do_sample=True, **kw)
    best = truth.masked_fill(torch.arange(vocab, device=device) == eos, float("-inf")).argmax(-1)
    if not torch.equal(greedy, best):
        raise RuntimeError(f"greedy tokens {greedy.tolist()} where torch gives {best.tolist()}")
    if (sampled == eos).any() or sampled.min() < 0 or sampled.max() >= vocab:
        raise RuntimeError(f"sampled tokens {sampled.tolist()} out of range or held back")
    for tok, lp in ((greedy, greedy_lp), (sampled, sampled_lp)):
        worst = (truth.gather(1, tok[:, None]).squeeze(1) - lp).abs().max().item()
        if worst > 1e-3:
            raise RuntimeError(f"log-prob off by {worst:.3g}")
