"""Forward passes shared by the actor, the reference and the critic: log-probs of the response tokens
(and their entropy) or values, computed micro-batch by micro-batch.

Sequences are laid out as [left-padded prompt | right-padded response]; the logits that predict the
response tokens are the R positions before the last one, so the LM head only runs on those
(`logits_to_keep`), which spares the full-vocabulary logits of the prompt.

Padded, every query row must have a key to attend to: a left-padding query under the causal padding mask has
none, and on CUDA SDPA's memory-efficient backward turns such a row into NaN gradients for every parameter
(even though the row's output is never used). `padded_attention_mask` lets each padding query attend to
itself only; valid queries see exactly what the 2D mask gives them.

With `remove_padding` (use_remove_padding) a micro-batch runs packed instead: its valid tokens in one row,
attention kept inside each sequence (engine/workers/packing.py), and the outputs scattered back to [B, R].
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.rollout.batch_invariant import exact_logprobs_and_entropy
from engine.algos.logprob import logprobs_and_entropy
from engine.protocol import Batch
from engine.workers.packing import packed_inputs, response_sources, unpack_response

MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids")


# ---- micro-batches: padding trimmed, optionally sized by a token budget (use_dynamic_bsz) -------------------
def token_budget_partition(prompt_lens: list[int], response_lens: list[int], max_tokens: int,
                           packed: bool = False) -> list[list[int]]:
    """Groups of row indices whose padded size — rows × (longest prompt + longest response in the group) —
    stays within `max_tokens` (a row longer than the budget on its own gets a group of its own). Rows are
    taken longest first, so similar lengths share a group and little padding is computed. `packed`: the
    group runs without padding, so its size is the sum of its rows' lengths."""
    order = sorted(range(len(prompt_lens)), key=lambda i: (-(prompt_lens[i] + response_lens[i]), i))
    groups: list[list[int]] = []
    cur: list[int] = []
    p_max = r_max = total = 0
    for i in order:
        p, r = max(p_max, prompt_lens[i]), max(r_max, response_lens[i])
        size = total + prompt_lens[i] + response_lens[i] if packed else (len(cur) + 1) * (p + r)
        if cur and size > max_tokens:
            groups.append(cur)
            cur, p, r, total = [], prompt_lens[i], response_lens[i], 0
        cur.append(i)
        p_max, r_max = p, r
        total += prompt_lens[i] + response_lens[i]
    if cur:
        groups.append(cur)
    return groups


def trim_padding(mb: Batch) -> Batch:
    """Drops the prompt columns that are padding in every row (left) and the response columns that are
    padding in every row (right). Tensors as wide as the sequence or the response are cut to match."""
    width, resp = mb["input_ids"].shape[1], mb["responses"].shape[1]
    prompt = width - resp
    mask = mb["attention_mask"].bool()
    p_any = mask[:, :prompt].any(0)
    p_keep = prompt - int(p_any.nonzero().min()) if bool(p_any.any()) else 1  # keep one column at least
    r_any = mask[:, prompt:].any(0)
    r_keep = int(r_any.nonzero().max()) + 1 if bool(r_any.any()) else 1
    if p_keep == prompt and r_keep == resp:
        return mb
    cols = torch.cat([torch.arange(prompt - p_keep, prompt), torch.arange(prompt, prompt + r_keep)])
    cols = cols.to(mb["input_ids"].device)
    tensors = {}
    for k, v in mb.tensors.items():
        if v.dim() >= 2 and v.shape[1] == width:
            tensors[k] = v.index_select(1, cols)
        elif v.dim() >= 2 and v.shape[1] == resp:
            tensors[k] = v[:, :r_keep]
        else:
            tensors[k] = v
    return Batch(tensors, dict(mb.meta), dict(mb.info))


def micro_batches(batch: Batch, micro: int, max_tokens: int | None = None,
                  packed: bool = False) -> tuple[list[Batch], torch.Tensor | None]:
    """Micro-batches of `batch` with padding trimmed: `micro` rows each, or with `max_tokens` (dynamic batch
    size) as many rows as fit in that token budget (counted without padding when `packed`). Returns
    (micro-batches, order): `order` is the row permutation used (None when rows stay in order); `unpermute`
    restores per-row outputs."""
    if not max_tokens:
        return [trim_padding(mb) for mb in batch.split(micro)], None
    mask = batch["attention_mask"]
    resp = batch["responses"].shape[1]
    prompt_lens = mask[:, :-resp].sum(-1).tolist()
    response_lens = mask[:, -resp:].sum(-1).tolist()
    groups = token_budget_partition(prompt_lens, response_lens, int(max_tokens), packed)
    order = torch.tensor([i for g in groups for i in g], dtype=torch.long)
    mbs, start = [], 0
    for g in groups:
        idx = order[start:start + len(g)]
        mbs.append(trim_padding(batch.index(idx)))
        start += len(g)
    return mbs, order


def pad_to(x: torch.Tensor, width: int, value: float = 0.0) -> torch.Tensor:
    """Right-pads [n, w] to [n, width] (outputs of a trimmed micro-batch back to the response width)."""
    return x if x.shape[1] == width else F.pad(x, (0, width - x.shape[1]), value=value)


def unpermute(x: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    if order is None:
        return x
    out = torch.empty_like(x)
    out[order.to(x.device)] = x
    return out


def padded_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, L] 0/1 → the 2D mask itself when no column is padding (SDPA then runs plain causal), else a 4D bool
    mask [B, 1, L, L]: causal over valid keys, and the diagonal, so that no query row is entirely masked.
    transformers takes a 4D mask as it is, whatever the attention implementation."""
    valid = attention_mask.bool()
    if bool(valid.all()):
        return attention_mask
    length = valid.shape[1]
    pos = torch.arange(length, device=valid.device)
    causal = pos[None, :] <= pos[:, None]  # [query, key]
    mask = (causal[None] & valid[:, None, :]) | (pos[None, :] == pos[:, None])[None]
    return mask[:, None]


def padded_inputs(mb: Batch) -> dict:
    return {"input_ids": mb["input_ids"], "attention_mask": padded_attention_mask(mb["attention_mask"]),
            "position_ids": mb["position_ids"]}


def response_logits(model, mb: Batch, temperature: float = 1.0) -> torch.Tensor:
    resp_len = mb["responses"].shape[1]
    width = mb["input_ids"].shape[1]
    # exactly the R positions that predict the response: the logits come out contiguous, so flattening them
    # for the log-prob kernels is a view (slicing [:, :-1] off R + 1 positions cost a full-vocabulary copy
    # forward and another in backward)
    keep = torch.arange(width - resp_len - 1, width - 1, device=mb["input_ids"].device)
    out = model(**padded_inputs(mb), use_cache=False, logits_to_keep=keep)
    logits = out.logits
    if logits.shape[1] != resp_len:  # a model that returns every position
        logits = logits[:, -resp_len - 1:-1, :]
    if temperature and temperature != 1.0:  # score under the distribution that was sampled from
        logits = logits / temperature
    return logits


def packed_response_logits(model, mb: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [N, V] predicting the N valid response tokens, their [B, R] mask), from one packed row; only
    those N positions go through the LM head."""
    resp_valid, keep = response_sources(mb["attention_mask"], mb["responses"].shape[1])
    out = model(**packed_inputs(mb["input_ids"], mb["attention_mask"], mb["position_ids"]), use_cache=False,
                logits_to_keep=keep)
    logits = out.logits[0]
    if logits.shape[0] != keep.numel():  # a model that returns every position
        logits = logits[keep]
    return logits, resp_valid


def response_log_probs(model, mb: Batch, temperature: float, calc_entropy: bool = False,
                       remove_padding: bool = False, exact: bool = False):
    """Log-probs [B, R] of the response tokens (and their entropy, else None); padding positions are 0 when
    packed (the padded path leaves whatever the model said there: callers mask them). `exact`: the log-softmax on
    fixed row tiles (engine/rollout/batch_invariant.py), as the exact-mode decoder computes it."""
    log_softmax = exact_logprobs_and_entropy if exact else logprobs_and_entropy
    if not remove_padding:
        logits = response_logits(model, mb, 1.0)  # the temperature is applied chunk by chunk, not on a copy
        return log_softmax(logits, mb["responses"], temperature or 1.0, calc_entropy)
    logits, resp_valid = packed_response_logits(model, mb)
    lp, ent = log_softmax(logits, mb["responses"][resp_valid], temperature or 1.0, calc_entropy)
    return unpack_response(lp, resp_valid), (unpack_response(ent, resp_valid) if ent is not None else None)


def response_values(model, mb: Batch, remove_padding: bool = False) -> torch.Tensor:
    """Critic values at the positions that predict each response token (value of the state before it)."""
    resp_len = mb["responses"].shape[1]
    if remove_padding:
        resp_valid, keep = response_sources(mb["attention_mask"], resp_len)
        out = model(**packed_inputs(mb["input_ids"], mb["attention_mask"], mb["position_ids"]), use_cache=False)
        values = unpack_response(out.logits[0, keep, 0].float(), resp_valid)
        return values * mb["response_mask"]
    out = model(**padded_inputs(mb), use_cache=False)
    values = out.logits[:, -resp_len - 1:-1, 0].float()
    return values * mb["response_mask"]


@torch.no_grad()
def batched_log_probs(model, batch: Batch, micro: int, temperature: float, calc_entropy: bool = False,
                      max_tokens: int | None = None, remove_padding: bool = False, exact: bool = False):
    width = batch["responses"].shape[1]
    mbs, order = micro_batches(batch.select(MODEL_INPUTS + ("responses",), meta_keys=()), micro, max_tokens,
                               remove_padding)
    lps, ents = [], []
    for mb in mbs:
        lp, ent = response_log_probs(model, mb, temperature, calc_entropy, remove_padding, exact)
        lps.append(pad_to(lp, width))
        if ent is not None:
            ents.append(pad_to(ent, width))
    return unpermute(torch.cat(lps), order), (unpermute(torch.cat(ents), order) if ents else None)


@torch.no_grad()
def batched_values(model, batch: Batch, micro: int, max_tokens: int | None = None,
                   remove_padding: bool = False) -> torch.Tensor:
    width = batch["responses"].shape[1]
    mbs, order = micro_batches(batch.select(MODEL_INPUTS + ("responses", "response_mask"), meta_keys=()), micro,
                               max_tokens, remove_padding)
    return unpermute(torch.cat([pad_to(response_values(model, mb, remove_padding), width) for mb in mbs]), order)
