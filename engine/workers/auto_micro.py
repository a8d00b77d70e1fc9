"""Micro-batches sized from GPU memory (`trainer.auto_micro_batch`, on by default).

`ppo_micro_batch_size_per_gpu=4` is a memory setting: with the default `token-mean` loss the gradient does not
depend on how a mini-batch is cut into micro-batches (engine/workers/loss_weights.py), and forward passes have
no loss at all. On a GPU with room for many times that, four rows per forward/backward leave the chip waiting
on the CPU. So when a role's configured micro-batch is far below what fits, the role runs token-budget
micro-batches instead (`use_dynamic_bsz` with a budget sized here), and gradient checkpointing is turned off
when the budget without it is still large. Same math, different cut. When the configured (or pinned) micro-batch
is kept, checkpointing is still turned off if that micro-batch fits without it: recomputing every layer's
forward in the backward costs a third of the update and buys memory nobody needs (W1: micro-batch 32 × 512
tokens on an H200).

The budget is an estimate, not a measurement: bytes per token from the model's shapes (the activations a
decoder layer keeps for backward, the LM head's logits for response tokens), against the memory left once
the weights, gradients, optimizer states and the rollout's KV cache are counted, with a safety margin.

Pinned: a role with `use_dynamic_bsz=True` keeps its own budget (checkpointing follows the rule above);
`trainer.auto_micro_batch=False` keeps every configured micro-batch and checkpointing setting as written. Loss
modes whose value depends on the cut (anything but token-mean for updates) keep the configured micro-batches for
the update.
"""
from __future__ import annotations

import dataclasses

import torch

from engine.rollout import registry as rollout_registry

GB = 2**30
# bytes per token × this: allocator fragmentation, transient buffers, estimate error. Measured on an H100
# (2026-12-06, engine/bench/results/2026-12-06-h100a-c09-w1-nockpt.jsonl): W1's compiled update without
# checkpointing peaked at 31.1 GB, weights and AdamW states included, where the estimate × 1.6 asked 64 GB of
# activations alone; 1.25 still leaves the estimate above the measured activations by about 2×
SAFETY = 1.25
USABLE = 0.85           # share of the device's memory we plan to use at all
MIN_NO_CHECKPOINT = 8192   # turn checkpointing off only if a micro-batch of at least this many tokens fits
FAR_BELOW = 2           # apply when the budget holds at least this many of the configured micro-batches
CAP = 65536             # no micro-batch above this many tokens (longer kernels gain nothing)
SPLIT_FREE_LOSSES = ("token-mean",)


@dataclasses.dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    vocab: int
    kv_dim: int  # key/value width per token and layer (heads × head_dim)

    @classmethod
    def of(cls, config) -> Shape:
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        return cls(config.hidden_size, getattr(config, "intermediate_size", 4 * config.hidden_size),
                   config.num_hidden_layers, config.vocab_size, kv_heads * head_dim)


def layer_activation_bytes(s: Shape) -> int:
    """bf16 tensors one decoder layer keeps per token for backward: the two RMSNorms (fp32 input and bf16
    output), q/k/v and their rotated copies, attention output, o_proj input (~24·hidden), and the MLP's
    gate, up, activation and down-projection input (~8·intermediate)."""
    return 24 * s.hidden + 8 * s.kv_dim + 8 * s.intermediate


def head_bytes(s: Shape) -> int:
    """Per response token through the LM head with gradients: bf16 logits and their gradient, fp32 softmax
    statistics of the log-prob kernel (~8 bytes per vocabulary entry)."""
    return 8 * s.vocab


def train_bytes_per_token(s: Shape, checkpointing: bool, response_share: float, lm_head: bool) -> float:
    per_layer = layer_activation_bytes(s)
    # checkpointed: each layer keeps its input, and one layer at a time is recomputed in full
    body = s.layers * 2 * s.hidden + per_layer if checkpointing else s.layers * per_layer
    return SAFETY * (body + (response_share * head_bytes(s) if lm_head else 0))


def forward_bytes_per_token(s: Shape, response_share: float, lm_head: bool) -> float:
    """No gradients: one layer's transients, plus bf16 logits and fp32 log-softmax for response tokens."""
    return SAFETY * (layer_activation_bytes(s) + (response_share * 10 * s.vocab if lm_head else 0))


def kv_cache_bytes(s: Shape, rows: int, seq_len: int) -> int:
    return rows * seq_len * s.layers * 2 * s.kv_dim * 2


def behaviour_bytes(cfg, shape: Shape, params: int, rows: int, seq_len: int) -> float:
    """The async modes' behaviour policy (engine/trainer/ASYNC.md), built after this plan on the same device: a copy
    of the actor (its full weights in bf16 on every worker, unsharded; the published versions wait on the host),
    which decodes while the update runs; separate_async's copy is in a process of its own, with its own KV cache and
    CUDA context beside the worker's. `params` over-counts by the critic's, on the safe side."""
    v1 = cfg.trainer.v1
    if not cfg.trainer.use_v1 or v1.trainer_mode == "sync":
        return 0.0
    copy = 2.0 * params
    if v1.trainer_mode == "separate_async":
        copy += kv_cache_bytes(shape, rows, seq_len) + 1 * GB
    return copy


def budget(available: float, bytes_per_token: float) -> int:
    """Tokens per micro-batch, rounded down to 1024 and capped."""
    return int(min(CAP, max(0.0, available) / bytes_per_token) // 1024 * 1024)


@dataclasses.dataclass
class Plan:
    """What was chosen, per phase: token budget or None (configured micro-batches); checkpointing per model."""
    available_gb: float
    budgets: dict[str, int | None]
    checkpointing: dict[str, bool]
    notes: list[str]

    def describe(self) -> str:
        parts = [f"{k}: {f'{v} tokens' if v else 'as configured'}" for k, v in self.budgets.items()]
        parts += [f"{k} gradient checkpointing {'on' if v else 'off'}" for k, v in self.checkpointing.items()]
        return (f"auto micro-batch ({self.available_gb:.0f} GB for activations): " + "; ".join(parts)
                + (" — " + "; ".join(self.notes) if self.notes else "")
                + ". Pin with use_dynamic_bsz=True + the *_max_token_len_per_gpu keys, or trainer.auto_micro_batch=False.")


def plan(cfg, shape: Shape, total_bytes: float, used_bytes: float, trainable_params: int) -> Plan:
    """Choose micro-batch token budgets and checkpointing for one worker.

    total_bytes: the device's memory; used_bytes: what is in use now (weights; a vLLM engine that is awake);
    trainable_params: actor + critic parameters (their fp32 gradients and AdamW states are not allocated yet: 12
    bytes each)."""
    arr, critic, data = cfg.actor_rollout_ref, cfg.critic, cfg.data
    prompt, response = data.max_prompt_length, data.max_response_length
    seq = prompt + response
    rows = data.train_batch_size * arr.rollout.n  # upper bound on one worker's generation batch
    # the HF rollout's KV cache is allocated by the trainer's own allocator and may stay cached into training;
    # vLLM's lives in its own pool, counted in used_bytes while the engine is awake and returned while it sleeps
    kv = 0 if rollout_registry.backend(arr.rollout).own_memory else kv_cache_bytes(shape, rows, seq)
    available = (USABLE * total_bytes - used_bytes - 12 * trainable_params - kv
                 - behaviour_bytes(cfg, shape, trainable_params, rows, seq))
    # the share of a padded micro-batch's tokens that are response tokens: at most response / (response + the
    # shortest prompt); assume short prompts (a quarter of the limit) so the LM head is not underestimated
    share = response / (response + max(1, prompt // 4))
    notes: list[str] = []
    budgets: dict[str, int | None] = {}
    checkpointing: dict[str, bool] = {}

    def far_below(micro: int | None, tokens: int) -> bool:
        return bool(micro) and tokens >= FAR_BELOW * micro * seq

    def update(role: str, section, gc_on: bool, lm_head: bool):
        free_bpt = train_bytes_per_token(shape, False, share, lm_head)
        free = budget(available, free_bpt)
        micro = section.ppo_micro_batch_size_per_gpu
        if section.use_dynamic_bsz:
            budgets[f"{role}_update"] = None
            notes.append(f"{role} update pinned (use_dynamic_bsz)")
        elif section.loss_agg_mode not in SPLIT_FREE_LOSSES:
            budgets[f"{role}_update"] = None
            notes.append(f"{role} update keeps its micro-batch ({section.loss_agg_mode} depends on the cut)")
        else:
            keep_gc = gc_on and free < MIN_NO_CHECKPOINT
            tokens = budget(available, train_bytes_per_token(shape, True, share, lm_head)) if keep_gc else free
            if far_below(micro, tokens):  # token budget, sized with or without checkpointing
                budgets[f"{role}_update"] = tokens
                checkpointing[role] = keep_gc
                return
            configured = micro * seq if micro else None
            if gc_on and not keep_gc and configured and configured * free_bpt > max(0.0, available):
                # the configured micro-batch needs checkpointing (its rows counted at full length), a token budget
                # of at least MIN_NO_CHECKPOINT does not: smaller cuts without recomputation beat recomputing
                # every layer (W2 on an H100: update 3.17 s with checkpointing, 2.54 s without; h100d c04/c05)
                budgets[f"{role}_update"] = free
                checkpointing[role] = False
                notes.append(f"{role} runs {free}-token micro-batches without checkpointing (its micro-batch of "
                             f"{configured} tokens needs checkpointing)")
                return
            budgets[f"{role}_update"] = None
        # the configured (or pinned) micro-batch runs: checkpointing off when its tokens fit without it
        if section.use_dynamic_bsz:
            kept = section.ppo_max_token_len_per_gpu
        else:
            kept = micro * seq if micro else None
        fits = bool(kept) and kept * free_bpt <= max(0.0, available)
        checkpointing[role] = gc_on and not fits
        if gc_on and fits:
            notes.append(f"{role} keeps its micro-batch ({kept} tokens), which fits without checkpointing")

    def forward(name: str, section, micro: int | None, lm_head: bool):
        if section.log_prob_use_dynamic_bsz if hasattr(section, "log_prob_use_dynamic_bsz") else section.use_dynamic_bsz:
            budgets[name] = None
            return
        tokens = budget(available, forward_bytes_per_token(shape, share, lm_head))
        budgets[name] = tokens if far_below(micro, tokens) else None

    update("actor", arr.actor, arr.model.enable_gradient_checkpointing, lm_head=True)
    forward("old_log_prob", arr.rollout, arr.rollout.log_prob_micro_batch_size_per_gpu, lm_head=True)
    forward("ref", arr.ref, arr.ref.log_prob_micro_batch_size_per_gpu, lm_head=True)
    if critic.enable:
        update("critic", critic, critic.model.enable_gradient_checkpointing, lm_head=False)
        forward("values", critic, critic.forward_micro_batch_size_per_gpu, lm_head=False)
    return Plan(available / GB, budgets, checkpointing, notes)


def apply(cfg, p: Plan) -> None:
    """Write the plan into this worker's config (the roles read their micro-batching from it)."""
    arr, critic = cfg.actor_rollout_ref, cfg.critic
    b = p.budgets
    if b.get("actor_update"):
        arr.actor.use_dynamic_bsz, arr.actor.ppo_max_token_len_per_gpu = True, b["actor_update"]
    if b.get("old_log_prob"):
        arr.rollout.log_prob_use_dynamic_bsz, arr.rollout.log_prob_max_token_len_per_gpu = True, b["old_log_prob"]
    if b.get("ref"):
        arr.ref.log_prob_use_dynamic_bsz, arr.ref.log_prob_max_token_len_per_gpu = True, b["ref"]
    if b.get("critic_update"):
        critic.use_dynamic_bsz, critic.ppo_max_token_len_per_gpu = True, b["critic_update"]
    # the critic's forward follows critic.use_dynamic_bsz too: give it its own budget only when the update also
    # runs by tokens (one switch covers both in the schema)
    if b.get("values") and critic.use_dynamic_bsz:
        critic.forward_max_token_len_per_gpu = b["values"]
    if "actor" in p.checkpointing:
        arr.model.enable_gradient_checkpointing = p.checkpointing["actor"]
    if "critic" in p.checkpointing:
        critic.model.enable_gradient_checkpointing = p.checkpointing["critic"]


def choose(cfg, actor_module, critic_module=None, own_pool: bool = False) -> str:
    """On a worker's GPU, with its roles built: plan from the device's memory, write the plan into the config, turn
    checkpointing off on the modules where the plan did; returns the plan's description. `own_pool`: the rollout
    engine keeps its memory in a pool of its own that it returns while asleep (vLLM's sleep mode)."""
    trainable = sum(p.numel() for p in actor_module.parameters())
    if critic_module is not None:
        trainable += sum(p.numel() for p in critic_module.parameters())
    free, total = torch.cuda.mem_get_info()
    # what the device has in use, not what torch's allocator counts: a sleeping engine keeps its tensors allocated
    # in the allocator's books while their memory is returned to the device
    used = total - free if own_pool else torch.cuda.memory_allocated()
    chosen = plan(cfg, Shape.of(actor_module.config), total, used, trainable)
    apply(cfg, chosen)
    # the actor's and critic's micro-batch sizes follow the config (UpdatedModel reads them at each update)
    for module, on in ((actor_module, cfg.actor_rollout_ref.model.enable_gradient_checkpointing),
                       (critic_module, cfg.critic.model.enable_gradient_checkpointing)):
        if module is not None and not on and getattr(module, "is_gradient_checkpointing", False):
            module.gradient_checkpointing_disable()
    return chosen.describe()
