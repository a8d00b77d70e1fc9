"""Derived defaults (verl's `${...}` interpolations) and cross-field checks, done once before any
worker starts so that a bad combination fails in a second with a message naming the keys."""
from __future__ import annotations

import difflib

from engine.config.errors import ConfigError
from engine.config.registry import refuse_unsupported
from engine.config.rollout_correction import parse_is_threshold, parse_rs
from engine.config.schema import PPOConfig, all_keys
from engine.config.trainer_mode import check_trainer_mode
from engine.config.vocab import GROUP_ESTIMATORS, LoggerName, names
from engine.rollout import registry as rollout_registry


def _largest_divisor_at_most(n: int, cap: int) -> int:
    for d in range(min(n, cap), 0, -1):
        if n % d == 0:
            return d
    return 1


def logger_names(value) -> list[str]:
    """trainer.logger as a list of known names, else a ConfigError naming the key and the closest name."""
    known = names(LoggerName)
    listed = [value] if isinstance(value, str) else list(value)
    for name in listed:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"trainer.logger: unknown logger '{name}'.{hint} Known: {', '.join(known)} "
                              f"(e.g. trainer.logger=[console,file]).", "trainer.logger")
    return listed


def world_size(cfg: PPOConfig) -> int:
    return cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node


def _check_rollout_correction(cfg: PPOConfig) -> None:
    """Thresholds parse, and the rollout returns the log-probs the correction divides by."""
    rc, rollout = cfg.algorithm.rollout_correction, cfg.actor_rollout_ref.rollout
    prefix = "algorithm.rollout_correction"
    try:
        if rc.rollout_is is not None:
            parse_is_threshold(rc.rollout_is_threshold)
        if rc.rollout_rs is not None:
            parse_rs(rc.rollout_rs, rc.rollout_rs_threshold)
    except ValueError as exc:
        raise ConfigError(f"{prefix}: {exc}", prefix) from None
    if rc.rollout_is is None and rc.rollout_rs is None:
        return
    if rollout_registry.without_log_probs(rollout):
        raise ConfigError(f"{prefix}.rollout_is/rollout_rs need the rollout's log-probs, which transformers' generate "
                          "does not return: use actor_rollout_ref.rollout.name=vllm or "
                          "+actor_rollout_ref.rollout.engine_kwargs.hf.decode=static", f"{prefix}.rollout_is")


def _check_dapo(cfg: PPOConfig) -> None:
    """Dynamic sampling and overlong shaping: the keys that go together are set together."""
    fg, rm = cfg.algorithm.filter_groups, cfg.reward_model
    if fg.enable and fg.metric is None:
        raise ConfigError("algorithm.filter_groups.enable=True needs algorithm.filter_groups.metric (reward, acc, score, "
                          "seq_reward or seq_final_reward)", "algorithm.filter_groups.metric")
    if fg.enable and fg.metric == "seq_final_reward" and cfg.algorithm.use_kl_in_reward:
        raise ConfigError("algorithm.filter_groups.metric=seq_final_reward with algorithm.use_kl_in_reward=True is not "
                          "supported (the KL penalty comes after filtering): use seq_reward",
                          "algorithm.filter_groups.metric")
    ob = rm.reward_kwargs.overlong_buffer_cfg
    if ob.enable:
        if rm.reward_manager != "dapo":
            raise ConfigError("reward_model.reward_kwargs.overlong_buffer_cfg.enable=True needs "
                              "reward_model.reward_manager=dapo (as in verl)",
                              "reward_model.reward_kwargs.overlong_buffer_cfg.enable")
        rm.reward_kwargs.max_resp_len = rm.reward_kwargs.max_resp_len or cfg.data.max_response_length
        if not 0 < ob.len <= rm.reward_kwargs.max_resp_len:
            raise ConfigError(f"reward_model.reward_kwargs.overlong_buffer_cfg.len={ob.len} must be > 0 and at most "
                              f"reward_model.reward_kwargs.max_resp_len={rm.reward_kwargs.max_resp_len}",
                              "reward_model.reward_kwargs.overlong_buffer_cfg.len")


def _runtime_env(cfg: PPOConfig) -> None:
    """ray_init.runtime_env without the entries that ask for nothing (null, as verl's scripts pass
    py_executable=null), environment values as the strings Ray wants, and checked by Ray's own RuntimeEnv."""
    env = {k: v for k, v in cfg.ray_init.runtime_env.items() if v is not None}
    if "env_vars" in env:
        if not isinstance(env["env_vars"], dict):
            raise ConfigError(f"ray_init.runtime_env.env_vars: must be a mapping of names to values, one key each "
                              f"(verl 0.9: ray_kwargs.ray_init.runtime_env.env_vars.MY_VAR=1); got {env['env_vars']!r}.",
                              "ray_init.runtime_env.env_vars")
        # `env_vars.OMP_NUM_THREADS=4` parses as a number; an environment holds strings
        env["env_vars"] = {str(k): str(v) for k, v in env["env_vars"].items() if v is not None}
    if env:
        try:
            from ray.runtime_env import RuntimeEnv
        except ImportError:  # pragma: no cover - ray is a dependency; without it Ray cannot start either
            pass
        else:
            try:
                RuntimeEnv(**env)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"ray_init.runtime_env: not a runtime environment Ray accepts (verl 0.9: "
                                  f"ray_kwargs.ray_init.runtime_env): {exc} Fix or remove the key (see Ray's "
                                  "runtime_env documentation).", "ray_init.runtime_env") from None
    cfg.ray_init.runtime_env = env


def resolve(cfg: PPOConfig) -> PPOConfig:
    cfg = cfg.model_copy(deep=True)
    # A resolved config sent back (the dashboard logger posts one) carries derived keys: their derived value is no
    # setting of the user's.
    if cfg.critic.rollout_n == cfg.actor_rollout_ref.rollout.n:
        cfg.critic.rollout_n = None
    refuse_unsupported(cfg, all_keys())  # every key works or is refused (engine/config/registry.py)
    data, actor_rollout_ref, alg, tr = cfg.data, cfg.actor_rollout_ref, cfg.algorithm, cfg.trainer
    actor, rollout, ref, critic = actor_rollout_ref.actor, actor_rollout_ref.rollout, actor_rollout_ref.ref, cfg.critic
    n = rollout.n
    world = world_size(cfg)

    tr.logger = logger_names(tr.logger)  # a misspelt name fails here, not after start-up
    rollout.name = rollout_registry.canonical(rollout.name)  # verl's old name of the HF rollout: naive
    rollout_registry.check(cfg)  # what the backend supports (LoRA, multi-turn, the device)
    rollout.prompt_length = rollout.prompt_length or data.max_prompt_length
    rollout.response_length = rollout.response_length or data.max_response_length
    if data.val_max_samples is not None and data.val_max_samples <= 0:  # verl's -1: all
        data.val_max_samples = None
    if tr.default_local_dir is None:
        tr.default_local_dir = f"checkpoints/{tr.project_name}/{tr.experiment_name}"

    for optim in (actor.optim, critic.optim):
        if optim.lr_scheduler_type:
            optim.warmup_style = optim.lr_scheduler_type
    if actor.clip_ratio_low is None:
        actor.clip_ratio_low = actor.clip_ratio
    if actor.clip_ratio_high is None:
        actor.clip_ratio_high = actor.clip_ratio

    # KL: verl ignores kl_ctrl.kl_coef unless use_kl_in_reward=True. "auto" turns it on for PPO with a
    # critic when no KL loss is used, so the coefficient a user sets actually constrains the policy.
    if alg.use_kl_in_reward is None:
        alg.use_kl_in_reward = alg.adv_estimator == "gae" and not actor.use_kl_loss

    _check_rollout_correction(cfg)
    _check_dapo(cfg)
    check_trainer_mode(cfg, world)  # verl 0.9's trainer.use_v1 / trainer.v1.* (engine/config/trainer_mode.py)
    _runtime_env(cfg)

    if critic.enable is None:
        critic.enable = alg.adv_estimator == "gae"
    if alg.adv_estimator == "gae" and not critic.enable:
        raise ConfigError("algorithm.adv_estimator=gae needs a critic: remove critic.enable=False or choose "
                          "algorithm.adv_estimator=grpo.", "algorithm.adv_estimator")
    if alg.adv_estimator in GROUP_ESTIMATORS and n < 2:
        raise ConfigError(f"algorithm.adv_estimator={alg.adv_estimator} compares samples of the same prompt: set "
                          f"actor_rollout_ref.rollout.n to 2 or more (e.g. 8); it is {n}.", "algorithm.adv_estimator")
    critic.model.path = critic.model.path or actor_rollout_ref.model.path
    critic.ppo_mini_batch_size = critic.ppo_mini_batch_size or actor.ppo_mini_batch_size
    critic.ppo_epochs = critic.ppo_epochs or actor.ppo_epochs
    critic.loss_scale_factor = critic.loss_scale_factor or actor.loss_scale_factor
    critic.rollout_n = n

    # ---- batch sizes: everything must split evenly over the data-parallel workers -----------------
    bsz = data.train_batch_size
    if actor.ppo_mini_batch_size > bsz:
        raise ConfigError(f"actor_rollout_ref.actor.ppo_mini_batch_size ({actor.ppo_mini_batch_size}) is larger "
                          f"than data.train_batch_size ({bsz}); make it at most {bsz}.",
                          "actor_rollout_ref.actor.ppo_mini_batch_size")
    if bsz % actor.ppo_mini_batch_size:
        raise ConfigError(f"data.train_batch_size ({bsz}) must be a multiple of "
                          f"actor_rollout_ref.actor.ppo_mini_batch_size ({actor.ppo_mini_batch_size}).",
                          "data.train_batch_size")
    if (bsz * n) % world:
        raise ConfigError(f"data.train_batch_size × rollout.n = {bsz * n} sequences cannot be split evenly over "
                          f"{world} workers (trainer.nnodes × trainer.n_gpus_per_node); change one of them.",
                          "data.train_batch_size")
    for role, mini in (("actor_rollout_ref.actor", actor.ppo_mini_batch_size),
                       ("critic", critic.ppo_mini_batch_size)):
        if (mini * n) % world:
            raise ConfigError(f"{role}.ppo_mini_batch_size × rollout.n = {mini * n} sequences cannot be split "
                              f"evenly over {world} workers; make it a multiple of {world}.",
                              f"{role}.ppo_mini_batch_size")
    per_worker_mini = actor.ppo_mini_batch_size * n // world
    if actor.ppo_micro_batch_size_per_gpu is None:
        if actor.ppo_micro_batch_size:
            actor.ppo_micro_batch_size_per_gpu = max(1, actor.ppo_micro_batch_size // world)
        else:
            actor.ppo_micro_batch_size_per_gpu = _largest_divisor_at_most(per_worker_mini, 16)
    # a micro-batch larger than the mini-batch means "the whole mini-batch at once"
    actor.ppo_micro_batch_size_per_gpu = min(actor.ppo_micro_batch_size_per_gpu, per_worker_mini)
    if not actor.use_dynamic_bsz and per_worker_mini % actor.ppo_micro_batch_size_per_gpu:
        raise ConfigError(
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu ({actor.ppo_micro_batch_size_per_gpu}) must "
            f"divide the per-worker mini-batch (ppo_mini_batch_size × rollout.n / workers = {per_worker_mini}).",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
    for section in (rollout, ref):
        if section.log_prob_micro_batch_size_per_gpu is None:
            section.log_prob_micro_batch_size_per_gpu = (
                max(1, section.log_prob_micro_batch_size // world) if section.log_prob_micro_batch_size
                else actor.ppo_micro_batch_size_per_gpu)
    critic_per_worker = critic.ppo_mini_batch_size * n // world
    if critic.ppo_micro_batch_size_per_gpu is None:
        critic.ppo_micro_batch_size_per_gpu = (
            max(1, critic.ppo_micro_batch_size // world) if critic.ppo_micro_batch_size
            else _largest_divisor_at_most(critic_per_worker, actor.ppo_micro_batch_size_per_gpu))
    critic.ppo_micro_batch_size_per_gpu = min(critic.ppo_micro_batch_size_per_gpu, critic_per_worker)
    if critic.enable and not critic.use_dynamic_bsz and critic_per_worker % critic.ppo_micro_batch_size_per_gpu:
        raise ConfigError(f"critic.ppo_micro_batch_size_per_gpu ({critic.ppo_micro_batch_size_per_gpu}) must divide "
                          f"the per-worker critic mini-batch ({critic_per_worker}).",
                          "critic.ppo_micro_batch_size_per_gpu")
    if critic.forward_micro_batch_size_per_gpu is None:
        critic.forward_micro_batch_size_per_gpu = (
            max(1, critic.forward_micro_batch_size // world) if critic.forward_micro_batch_size
            else critic.ppo_micro_batch_size_per_gpu)

    if tr.resume_mode == "resume_path" and not tr.resume_from_path:
        raise ConfigError("trainer.resume_mode=resume_path needs trainer.resume_from_path=<checkpoint dir>.",
                          "trainer.resume_from_path")
    if rollout.tensor_model_parallel_size > world:
        raise ConfigError(f"actor_rollout_ref.rollout.tensor_model_parallel_size "
                          f"({rollout.tensor_model_parallel_size}) exceeds the {world} workers.",
                          "actor_rollout_ref.rollout.tensor_model_parallel_size")
    return cfg


def uses_reference(cfg: PPOConfig) -> bool:
    """The run keeps a frozen reference policy: a KL term needs its log-probs (in the reward or in the loss)."""
    return bool(cfg.algorithm.use_kl_in_reward or cfg.actor_rollout_ref.actor.use_kl_loss)
