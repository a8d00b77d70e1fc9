"""Rollout with transformers' `generate`, on the actor's own (sharded) module.

The FSDP2 shards are gathered once for the whole generation call (`unsharded`), so the rollout uses
the current actor weights in place — no copy and no weight sync step. Output layout:
`input_ids = [left-padded prompt | right-padded response]`, `response_mask` = 1 up to and including
the first end token.
"""
from __future__ import annotations

import torch

from engine.distributed.fsdp import unsharded
from engine.protocol import Batch
from engine.rollout import freshness
from engine.rollout.static_decoder import StaticDecoder


def eos_ids(model, tokenizer) -> list[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    ids = eos if isinstance(eos, list) else [eos]
    return [i for i in ids if i is not None]


def response_mask_from(responses: torch.Tensor, eos: list[int], pad_id: int | None = None) -> torch.Tensor:
    """1 for tokens up to and including the first end token; 0 after it."""
    is_eos = torch.zeros_like(responses, dtype=torch.bool)
    for e in eos:
        is_eos |= responses == e
    # positions strictly after the first eos: cumulative count of eos seen before this position > 0
    seen_before = torch.cumsum(is_eos.int(), dim=1) - is_eos.int()
    return (seen_before == 0).to(torch.long)


def assemble(prompts: Batch, responses: torch.Tensor, eos: list[int], pad_id: int,
             response_mask: torch.Tensor | None = None) -> Batch:
    """Join prompts and generated responses into the training layout (`response_mask`: the answers' lengths when
    known, e.g. carried answers assembled from chunks; else up to each first end token)."""
    if response_mask is None:
        response_mask = response_mask_from(responses, eos, pad_id)
    responses = torch.where(response_mask.bool(), responses, torch.full_like(responses, pad_id))
    attention_mask = torch.cat([prompts["attention_mask"], response_mask], dim=1)
    last_pos = prompts["position_ids"][:, -1:]
    steps = torch.arange(1, responses.shape[1] + 1, device=responses.device).unsqueeze(0)
    position_ids = torch.cat([prompts["position_ids"], last_pos + steps], dim=1)
    tensors = {
        "prompts": prompts["input_ids"],
        "responses": responses,
        "input_ids": torch.cat([prompts["input_ids"], responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": response_mask,
    }
    return Batch(tensors, dict(prompts.meta), dict(prompts.info))


def hf_options(rollout_cfg, device: str) -> dict:
    """`actor_rollout_ref.rollout.engine_kwargs.hf.*` (added with `+key=value`): `decode` = static (static KV
    cache + CUDA graphs, static_decoder.py; the default on GPU) or generate (transformers'
    `generate`; the default on CPU); `cuda_graphs` = true/false and `compile` = true/false (torch.compile of
    the decode step's norms and MLPs; default true on GPU), `triton_attention` = true/false (the one-kernel decode
    attention of kernels/decode_attention.py, GPU and bf16/fp16 only), `fused_sampling` = true/false (one
    Triton kernel for the logsumexp, the min-tokens mask and Gumbel-max sampling, kernels/fused_sampling.py;
    plain sampling and greedy only, top-k/top-p keep the torch path), `compile_step` = true/false (the whole decode
    forward as one torch.compile'd graph instead of compiled norms/MLPs around eager attention code) — these three
    default to true on GPU (timed faster there with the same log-prob check; each falls back with a warning when
    its first-use check fails) and false on CPU; all static decode only; `compact_every` = N (default
    32, 0 = off): every N decode steps, drop the rows that have ended from the static decoder's batch and KV cache
    once at most half are still running."""
    opts = dict(getattr(rollout_cfg.engine_kwargs, "hf", None) or {})
    gpu = device == "cuda"
    decode = str(opts.get("decode", "static" if device == "cuda" else "generate"))
    if decode not in ("static", "generate"):
        raise ValueError(f"actor_rollout_ref.rollout.engine_kwargs.hf.decode={decode!r}: use static or generate")
    def flag(key, default):
        value = opts.get(key, default)
        return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")

    try:
        compact_every = int(opts.get("compact_every", 32))
    except (TypeError, ValueError):
        compact_every = -1
    if compact_every < 0:
        raise ValueError(f"actor_rollout_ref.rollout.engine_kwargs.hf.compact_every={opts.get('compact_every')!r}: "
                         "use a number of decode steps ≥ 0 (0 turns compaction off)")
    return {"decode": decode, "cuda_graphs": flag("cuda_graphs", True), "compile": flag("compile", device == "cuda"),
            "compact_every": compact_every, "triton_attention": flag("triton_attention", gpu),
            "fused_sampling": flag("fused_sampling", gpu), "compile_step": flag("compile_step", gpu)}


class HFRollout:
    def __init__(self, module, tokenizer, rollout_cfg, device: str):
        self.module, self.tokenizer, self.cfg, self.device = module, tokenizer, rollout_cfg, device
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids(module, tokenizer)[0]
        self.options = hf_options(rollout_cfg, device)
        self.static = None
        if self.options["decode"] == "static":
            self.static = StaticDecoder(module, cuda_graphs=self.options["cuda_graphs"],
                                        compile_blocks=self.options["compile"],
                                        compact_every=self.options["compact_every"],
                                        triton_attention=self.options["triton_attention"],
                                        fused_sampling=self.options["fused_sampling"],
                                        compile_step=self.options["compile_step"])
            # did the update reach the weights the twin decodes with: checked at each training generation
            self.freshness = freshness.for_static_decoder(module, self.static)
        self.freshness_seen: dict[str, float] | None = None  # this step's worst rollout/* numbers (worker pops them)

    def take_freshness(self) -> dict[str, float]:
        """The rollout/* numbers of the static decoder's checks since the last call (engine/rollout/freshness.py);
        {} for transformers' generate, which samples with the actor module itself."""
        seen, self.freshness_seen = self.freshness_seen, None
        return seen or {}

    def sampling_kwargs(self, validate: bool) -> dict:
        src = self.cfg.val_kwargs if validate else self.cfg
        do_sample = bool(src.do_sample) and src.temperature > 0
        kwargs = {"do_sample": do_sample}
        if do_sample:
            kwargs.update(temperature=float(src.temperature), top_p=float(src.top_p),
                          top_k=int(src.top_k) if src.top_k and src.top_k > 0 else 0)
        return kwargs

    @torch.no_grad()
    def generate(self, prompts: Batch, validate: bool = False, max_new_tokens: int | None = None) -> Batch:
        """`max_new_tokens` (the agent loop's turns): at most this many tokens instead of rollout.response_length."""
        response_length = int(max_new_tokens or self.cfg.response_length)
        eos = eos_ids(self.module, self.tokenizer)
        gen_kwargs = dict(max_new_tokens=response_length, pad_token_id=self.pad_id, eos_token_id=eos,
                          use_cache=True, **self.sampling_kwargs(validate))
        if self.cfg.min_new_tokens:
            gen_kwargs["min_new_tokens"] = min(self.cfg.min_new_tokens, response_length)
        if self.cfg.ignore_eos:
            gen_kwargs["eos_token_id"] = None
        self.module.eval()
        if self.static is not None:
            return self._generate_static(prompts, validate, response_length, eos)
        with unsharded(self.module):
            out = self.module.generate(input_ids=prompts["input_ids"], attention_mask=prompts["attention_mask"],
                                       **gen_kwargs)
        responses = out[:, prompts["input_ids"].shape[1]:]
        if responses.shape[1] < response_length:  # all sequences stopped early: pad to the fixed width
            pad = torch.full((responses.shape[0], response_length - responses.shape[1]), self.pad_id,
                             dtype=responses.dtype, device=responses.device)
            responses = torch.cat([responses, pad], dim=1)
        return assemble(prompts, responses, [] if self.cfg.ignore_eos else eos, self.pad_id)

    def _generate_static(self, prompts: Batch, validate: bool, response_length: int, eos: list[int]) -> Batch:
        kw = self.sampling_kwargs(validate)
        stop = [] if self.cfg.ignore_eos else eos
        with unsharded(self.module):
            responses, log_probs = self.static.generate(
                prompts["input_ids"], prompts["attention_mask"], prompts["position_ids"], response_length,
                eos=stop, pad_id=self.pad_id, min_new_tokens=min(self.cfg.min_new_tokens or 0, response_length),
                do_sample=kw["do_sample"], temperature=kw.get("temperature", 1.0), top_k=kw.get("top_k", 0),
                top_p=kw.get("top_p", 1.0))
            if not validate:
                self.freshness_seen = freshness.worst(self.freshness_seen, self.freshness())
        batch = assemble(prompts, responses, stop, self.pad_id)
        batch.tensors["rollout_log_probs"] = log_probs * batch["response_mask"]
        return batch
