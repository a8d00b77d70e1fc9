"""verl 0.9's trainer switches (trainer.use_v1, trainer.v1.*) and the keys that go with the asynchronous modes,
checked before any worker starts: every combination either runs as it says or is refused naming the key.

The async modes (engine/trainer/ASYNC.md) generate on a copy of the policy while the current batch trains, so
each token's behaviour log-prob must come from the rollout itself; what they do not cover yet is refused here by
name rather than run synchronously.
"""
from __future__ import annotations

from engine.config.errors import ConfigError
from engine.rollout import registry as rollout_registry

ASYNC_MODES = ("colocate_async", "separate_async")


def is_async(cfg) -> bool:
    """The run uses one of verl's asynchronous v1 modes (verl's legacy trainer, use_v1=False, never does)."""
    return bool(cfg.trainer.use_v1) and cfg.trainer.v1.trainer_mode in ASYNC_MODES


def check_trainer_mode(cfg, world: int) -> None:
    v1 = cfg.trainer.v1
    sampler = v1.sampler
    if sampler.max_off_policy_threshold < 1:
        raise ConfigError(
            f"trainer.v1.sampler.max_off_policy_threshold={sampler.max_off_policy_threshold} must be at least 1 (verl "
            "counts a group's age as trained step - version that started it, so a group trained right after the "
            "weights that generated it has age 1).", "trainer.v1.sampler.max_off_policy_threshold",
            "Use 1 for on-policy training (the sync trainer's), verl's default 8 to let the rollout run ahead.")
    _check_resource_split(cfg, world)
    _check_bypass(cfg)
    _check_partial_rollout(cfg)
    _check_carry_over(cfg)
    if not is_async(cfg):
        return
    _check_separate_async(cfg)
    _check_async_scope(cfg, world)
    rc = cfg.algorithm.rollout_correction
    if not rc.bypass_mode and rc.rollout_is is None and rc.rollout_rs is None and not (
            {"rollout_is", "rollout_rs"} & rc.model_fields_set):
        # off-policy tokens need correcting: verl's decoupled token-level TIS (threshold 2.0) unless the user chose
        rc.rollout_is = "token"


def _check_partial_rollout(cfg) -> None:
    """trainer.v1.partial_rollout: answers continue across a weight update (engine/trainer/ASYNC.md)."""
    if not cfg.trainer.v1.partial_rollout:
        return
    key = "trainer.v1.partial_rollout"
    if not is_async(cfg):
        raise ConfigError(f"{key}=True continues answers across weight updates, which happen mid-generation only in "
                          "the async modes; the sync trainer generates a whole batch on one version.", key,
                          "Set trainer.use_v1=True trainer.v1.trainer_mode=colocate_async (or separate_async), "
                          "or remove the key.")
    if cfg.actor_rollout_ref.rollout.min_new_tokens:
        raise ConfigError(f"{key}=True generates each answer in chunks, and actor_rollout_ref.rollout.min_new_tokens="
                          f"{cfg.actor_rollout_ref.rollout.min_new_tokens} would be applied to every chunk.", key,
                          "Set actor_rollout_ref.rollout.min_new_tokens=0, or trainer.v1.partial_rollout=False.")


def _check_carry_over(cfg) -> None:
    """trainer.v1.carry_over_groups: groups in flight beyond the batch (engine/trainer/ASYNC.md, "Carry-over")."""
    extra = cfg.trainer.v1.carry_over_groups
    if not extra:
        return
    key = "trainer.v1.carry_over_groups"
    v1, bsz = cfg.trainer.v1, cfg.data.train_batch_size
    if not is_async(cfg):
        raise ConfigError(f"{key}={extra} lets unfinished groups run on into later batches, which only the async "
                          "modes do.", key, "Set trainer.use_v1=True trainer.v1.trainer_mode=colocate_async (or "
                                            "separate_async), or remove the key.")
    if extra > bsz:
        raise ConfigError(f"{key}={extra} is more than a batch (data.train_batch_size={bsz}): groups that must be "
                          "trained before they pass the threshold could then exceed one batch.", key,
                          f"Set {key} to at most {bsz}.")
    threshold = v1.sampler.max_off_policy_threshold
    warmup = (v1.separate_async if v1.trainer_mode == "separate_async" else v1.colocate_async).num_warmup_batches
    ahead = max(0, min(warmup, threshold - 1))  # as engine/trainer/asynchronous/staleness.py's AsyncSettings.ahead
    if threshold < ahead + 2:
        raise ConfigError(
            f"{key}={extra} with trainer.v1.sampler.max_off_policy_threshold={threshold}: a group started {ahead} "
            f"batch(es) ahead is trained at age {ahead + 1}, so every group carried one step further would pass the "
            "threshold (dropped, or forced to finish: nothing carries).", "trainer.v1.sampler.max_off_policy_threshold",
            f"Set trainer.v1.sampler.max_off_policy_threshold to at least {ahead + 2} (verl's default is 8).")
    for refused, why, fix in (
            (cfg.algorithm.filter_groups.enable, "DAPO's filter (algorithm.filter_groups) refills whole batches",
             "Set algorithm.filter_groups.enable=False, or trainer.v1.carry_over_groups=0."),
            (v1.partial_rollout, "carry-over already continues answers on newer weights, round by round",
             "Set trainer.v1.partial_rollout=False (carry-over generates in chunks of "
             "trainer.v1.partial_rollout_chunk tokens)."),
            (cfg.actor_rollout_ref.rollout.min_new_tokens, "generates in chunks, and "
             "actor_rollout_ref.rollout.min_new_tokens would be applied to every chunk",
             "Set actor_rollout_ref.rollout.min_new_tokens=0.")):
        if refused:
            raise ConfigError(f"{key}={extra}: not combined yet with this: {why}.", key, fix)


def _check_separate_async(cfg) -> None:
    """verl's invariant: one separate_async step is parameter_sync_step PPO mini-batches, one weight sync each."""
    if cfg.trainer.v1.trainer_mode != "separate_async":
        return
    step = cfg.trainer.v1.separate_async.parameter_sync_step
    bsz, mini = cfg.data.train_batch_size, cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    if bsz != step * mini:
        fix = (f"Set trainer.v1.separate_async.parameter_sync_step={bsz // mini}." if bsz % mini == 0 else
               "Make data.train_batch_size a multiple of actor_rollout_ref.actor.ppo_mini_batch_size.")
        raise ConfigError(
            f"trainer.v1.separate_async.parameter_sync_step={step}: verl requires data.train_batch_size = "
            f"parameter_sync_step × actor_rollout_ref.actor.ppo_mini_batch_size, and {bsz} != {step} × {mini}.",
            "trainer.v1.separate_async.parameter_sync_step", fix)


def _check_resource_split(cfg, world: int) -> None:
    """actor_rollout_ref.rollout.nnodes/n_gpus_per_node: verl's standalone rollout pool of separate_async."""
    rollout = cfg.actor_rollout_ref.rollout
    key = "actor_rollout_ref.rollout.nnodes"
    if rollout.nnodes and not (is_async(cfg) and cfg.trainer.v1.trainer_mode == "separate_async"):
        raise ConfigError(f"{key}={rollout.nnodes}: standalone rollout nodes exist only in "
                          "trainer.v1.trainer_mode=separate_async (with trainer.use_v1=True).", key,
                          "Set actor_rollout_ref.rollout.nnodes=0 or choose separate_async.")
    if rollout.nnodes:
        raise ConfigError(
            f"{key}={rollout.nnodes}: standalone rollout nodes (devices of their own) are not built yet; "
            "rlstudio's separate_async runs one rollout process beside each trainer worker, on its devices.", key,
            "Set actor_rollout_ref.rollout.nnodes=0 (the default).")
    per_node = rollout.n_gpus_per_node
    if per_node is not None and per_node != cfg.trainer.n_gpus_per_node:
        raise ConfigError(f"actor_rollout_ref.rollout.n_gpus_per_node={per_node} sizes a standalone rollout pool, "
                          "which needs actor_rollout_ref.rollout.nnodes > 0.", "actor_rollout_ref.rollout.n_gpus_per_node",
                          "Remove the key (the rollout runs on the trainer's devices).")


def _check_bypass(cfg) -> None:
    rc = cfg.algorithm.rollout_correction
    if not rc.bypass_mode:
        return
    key = "algorithm.rollout_correction.bypass_mode"
    if rc.rollout_is is not None or rc.rollout_rs is not None:
        raise ConfigError(f"{key}=True takes the rollout's log-probs as the old log-probs, so rollout_is/rollout_rs "
                          "(ratios of the old to the rollout's log-probs) would all be 1.", key,
                          "Set algorithm.rollout_correction.rollout_is=null and rollout_rs=null, or bypass_mode=False.")
    if _hf_generate(cfg):
        raise ConfigError(f"{key}=True needs the rollout's log-probs, which transformers' generate does not return.",
                          key, "Use actor_rollout_ref.rollout.name=vllm or "
                               "+actor_rollout_ref.rollout.engine_kwargs.hf.decode=static.")


def _hf_generate(cfg) -> bool:
    return rollout_registry.without_log_probs(cfg.actor_rollout_ref.rollout)  # unset: static on GPU, generate on CPU


def _check_async_scope(cfg, world: int) -> None:
    """What the async driver covers: the hf rollout with its log-probs, single-turn, full weights, on any number of
    workers (the behaviour copy is unsharded, so generation in the rollout thread runs no collective)."""
    mode = cfg.trainer.v1.trainer_mode
    key = "trainer.v1.trainer_mode"
    rollout = cfg.actor_rollout_ref.rollout
    if rollout_registry.backend(rollout).decode_choice and rollout_registry.hf_decode(rollout) is None:
        # the behaviour log-probs come from the static decoder (transformers' generate returns none)
        rollout.engine_kwargs.hf = {**(getattr(rollout.engine_kwargs, "hf", None) or {}), "decode": "static"}
    backend_why, backend_fix = rollout_registry.async_refusal(rollout) or (None, None)
    refusals = [
        # DAPO's filter scores in the rollout thread: the reward model's sharded forward there would run its
        # all-gathers beside the update's on the same process group (one worker has no peer to mismatch)
        (world > 1 and cfg.reward_model.enable and cfg.algorithm.filter_groups.enable,
         (f"scores with the reward model in the rollout thread under DAPO's filter (algorithm.filter_groups), whose "
          f"sharded forward would interleave collectives with the update's on {world} workers"),
         ("Set trainer.n_gpus_per_node=1 (and trainer.nnodes=1), algorithm.filter_groups.enable=False, or "
          "trainer.v1.trainer_mode=sync.")),
        (backend_why is not None, backend_why, backend_fix),
        (_hf_generate(cfg), "needs each token's behaviour log-prob, which transformers' generate does not return",
         "Set +actor_rollout_ref.rollout.engine_kwargs.hf.decode=static (the async default)."),
        (cfg.algorithm.adv_estimator == "remax", "does not generate ReMax's greedy baseline on the rollout copy yet",
         "Use algorithm.adv_estimator=grpo or gae, or trainer.v1.trainer_mode=sync."),
        (bool(rollout.multi_turn.enable), "does not run the multi-turn agent loop yet",
         "Set actor_rollout_ref.rollout.multi_turn.enable=False, or trainer.v1.trainer_mode=sync."),
        (bool(cfg.actor_rollout_ref.model.lora_rank), "copies full weights to its rollout; LoRA adapters are not "
                                                      "synced yet", "Set actor_rollout_ref.model.lora_rank=0, or "
                                                                    "trainer.v1.trainer_mode=sync."),
    ]
    for refused, why, fix in refusals:
        if refused:
            raise ConfigError(f"trainer.v1.trainer_mode={mode} {why}.", key, fix)
