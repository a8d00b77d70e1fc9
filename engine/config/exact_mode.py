"""actor_rollout_ref.rollout.exact (docs/exact-mode.md): what exact mode runs with, refused by name otherwise.

Exactness holds where the rollout and the actor run the same batch-invariant code on the same weights: the hf
rollout's static decoder on the actor's own module. A rollout with its own kernels (vLLM), a behaviour copy that
samples with other weights (the async modes), a LoRA actor (merged weights in the rollout, an adapter in the actor:
two different computations) and the agent loop (turns assembled from several generations) are refused.
"""
from __future__ import annotations

from engine.config.errors import ConfigError
from engine.config.trainer_mode import is_async
import engine.rollout.registry as rollout_registry

KEY = "actor_rollout_ref.rollout.exact"
# static-decoder options that compute differently from the actor's forward: off in exact mode, refused when set on
OFF_IN_EXACT = ("triton_attention", "fused_sampling", "compile_step", "compile", "cuda_graphs")


def _on(value) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")


def check_exact(cfg) -> None:
    rollout = cfg.actor_rollout_ref.rollout
    if not rollout.exact:
        return
    off = f"or set {KEY}=False"
    name = rollout_registry.canonical(rollout.name)
    if name != rollout_registry.HF.name:
        raise ConfigError(f"{KEY}=True needs actor_rollout_ref.rollout.name=hf (the static decoder runs the actor's "
                          f"own code); {name} samples with its own kernels (for vLLM, VLLM_BATCH_INVARIANT=1 makes "
                          "it batch-invariant, not equal to the actor).", KEY,
                          f"Set actor_rollout_ref.rollout.name=hf, {off}.")
    if rollout_registry.hf_decode(rollout) == "generate":
        raise ConfigError(f"{KEY}=True needs the static decoder: "
                          "actor_rollout_ref.rollout.engine_kwargs.hf.decode=generate returns no log-probs.", KEY,
                          f"Remove engine_kwargs.hf.decode (exact mode decodes with static), {off}.")
    hf = getattr(rollout.engine_kwargs, "hf", None) or {}
    for option in OFF_IN_EXACT:
        if option in hf and _on(hf[option]):
            raise ConfigError(f"{KEY}=True runs the decode step eagerly with the actor's batch-invariant ops: "
                              f"actor_rollout_ref.rollout.engine_kwargs.hf.{option}=true computes differently.",
                              f"actor_rollout_ref.rollout.engine_kwargs.hf.{option}",
                              f"Remove engine_kwargs.hf.{option}, {off}.")
    for role, model in (("actor_rollout_ref", cfg.actor_rollout_ref.model),):
        if model.lora_rank:
            raise ConfigError(f"{KEY}=True with {role}.model.lora_rank={model.lora_rank}: the rollout decodes with "
                              "the merged weights and the actor computes base + adapter, two different sums, so "
                              "their log-probs cannot be bit-equal.", f"{role}.model.lora_rank",
                              f"Set {role}.model.lora_rank=0, {off}.")
    if is_async(cfg):
        raise ConfigError(f"{KEY}=True with trainer.v1.trainer_mode={cfg.trainer.v1.trainer_mode}: the async modes "
                          "sample with a behaviour copy of older weights, so the rollout is not the actor's policy.",
                          "trainer.v1.trainer_mode", f"Set trainer.v1.trainer_mode=sync, {off}.")
    if rollout.multi_turn.enable:
        raise ConfigError(f"{KEY}=True with actor_rollout_ref.rollout.multi_turn.enable=True: multi-turn answers are "
                          "assembled from several generations and are not covered by exact mode.",
                          "actor_rollout_ref.rollout.multi_turn.enable",
                          f"Set actor_rollout_ref.rollout.multi_turn.enable=False, {off}.")
    rc = cfg.algorithm.rollout_correction
    if rc.rollout_is is not None or rc.rollout_rs is not None:
        raise ConfigError(f"{KEY}=True leaves no mismatch to correct: algorithm.rollout_correction.rollout_is / "
                          "rollout_rs would weigh every token by exactly 1.", "algorithm.rollout_correction.rollout_is",
                          f"Remove algorithm.rollout_correction.rollout_is/rollout_rs, {off}.")
