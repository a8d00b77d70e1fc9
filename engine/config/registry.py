"""Every key of the schema either works or is refused: no key is accepted and then ignored.

`READ_BY` names, for each key (a glob over dotted keys), the module that reads it; tests/unit/test_key_registry.py
checks that the module really reads the key's last name as an attribute. `REFUSED` lists the values rlstudio does
not implement, with the reason; `refuse_unsupported` turns any other value into a ConfigError naming the key.

To add a key to the schema: add one line to READ_BY naming the module that reads it (or to REFUSED, with the
values allowed and why). The registry test fails for a key that is in neither.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.config.errors import ConfigError
from engine.config.verl_layout import verl_spellings

# key glob -> the module (path from the repo root) that reads it
READ_BY: dict[str, str] = {
    "data.tokenizer": "engine/main_ppo.py",
    "data.train_files": "engine/main_ppo.py",
    "data.val_files": "engine/main_ppo.py",
    "data.prompt_key": "engine/main_ppo.py",
    "data.reward_fn_key": "engine/main_ppo.py",
    "data.max_prompt_length": "engine/main_ppo.py",
    "data.max_response_length": "engine/config/resolve.py",  # -> rollout.response_length
    "data.train_batch_size": "engine/main_ppo.py",
    "data.val_batch_size": "engine/trainer/ppo_trainer.py",
    "data.shuffle": "engine/main_ppo.py",
    "data.seed": "engine/main_ppo.py",
    "data.filter_overlong_prompts": "engine/main_ppo.py",
    "data.truncation": "engine/main_ppo.py",
    "data.trust_remote_code": "engine/main_ppo.py",
    "data.val_max_samples": "engine/main_ppo.py",
    "data.return_raw_chat": "engine/main_ppo.py",
    "actor_rollout_ref.model.path": "engine/main_ppo.py",
    "actor_rollout_ref.model.custom_chat_template": "engine/main_ppo.py",
    "*.model.override_config": "engine/workers/build.py",
    "*.model.enable_gradient_checkpointing": "engine/workers/build.py",
    "*.checkpoint.async_save": "engine/workers/checkpoints.py",
    "actor_rollout_ref.model.use_remove_padding": "engine/workers/build.py",
    "critic.model.use_remove_padding": "engine/workers/critic.py",
    # verl gathers a LoRA actor's base weights layer by layer for vLLM when True; here they always stream one
    # parameter at a time, so both values are accepted (True is acknowledged once)
    "actor_rollout_ref.rollout.layered_summon": "engine/rollout/vllm_rollout.py",
    # LoRA: the worker wraps the role (engine/adapters/lora.py); the rollout reads merged weights
    **{f"{role}.model.{key}": "engine/adapters/lora.py" for role in ("actor_rollout_ref", "critic")
       for key in ("lora_rank", "lora_alpha", "target_modules", "exclude_modules", "lora_adapter_path")},
    "*.model.trust_remote_code": "engine/workers/build.py",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "engine/workers/actor.py",
    "actor_rollout_ref.actor.ppo_micro_batch_size": "engine/config/resolve.py",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "engine/workers/update.py",
    "*.use_dynamic_bsz": "engine/workers/update.py",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "engine/workers/update.py",
    "*.grad_clip": "engine/workers/update.py",
    "actor_rollout_ref.actor.clip_ratio": "engine/config/resolve.py",
    "actor_rollout_ref.actor.clip_ratio_*": "engine/workers/actor.py",
    "actor_rollout_ref.actor.policy_loss.loss_mode": "engine/workers/actor.py",
    "*.loss_agg_mode": "engine/workers/actor.py",
    "*.loss_scale_factor": "engine/workers/update.py",
    "actor_rollout_ref.actor.entropy_coeff": "engine/workers/actor.py",
    "actor_rollout_ref.actor.use_kl_loss": "engine/workers/actor.py",
    "actor_rollout_ref.*.use_torch_compile": "engine/workers/build.py",
    "critic.use_torch_compile": "engine/workers/build.py",
    "actor_rollout_ref.actor.kl_loss_*": "engine/workers/actor.py",
    "*.ppo_epochs": "engine/workers/actor.py",
    "actor_rollout_ref.actor.shuffle": "engine/workers/actor.py",
    "critic.shuffle": "engine/workers/critic.py",
    "actor_rollout_ref.actor.recompute_old_log_prob": "engine/trainer/ppo_trainer.py",
    "*.optim.lr": "engine/workers/optim.py",
    "*.optim.lr_warmup_steps": "engine/workers/optim.py",
    "*.optim.lr_warmup_steps_ratio": "engine/workers/optim.py",
    "*.optim.min_lr_ratio": "engine/workers/optim.py",
    "*.optim.num_cycles": "engine/workers/optim.py",
    "*.optim.warmup_style": "engine/workers/optim.py",
    "*.optim.lr_scheduler_type": "engine/config/resolve.py",  # -> warmup_style
    "*.optim.total_training_steps": "engine/workers/optim.py",
    "*.optim.weight_decay": "engine/workers/optim.py",
    "*.optim.betas": "engine/workers/optim.py",
    "actor_rollout_ref.*.fsdp_config.param_offload": "engine/workers/build.py",
    "actor_rollout_ref.*.fsdp_config.optimizer_offload": "engine/workers/build.py",
    "actor_rollout_ref.*.fsdp_config.offload_policy": "engine/workers/build.py",
    "actor_rollout_ref.*.fsdp_config.reshard_after_forward": "engine/workers/build.py",
    "actor_rollout_ref.*.fsdp_config.model_dtype": "engine/workers/build.py",
    "critic.model.fsdp_config.param_offload": "engine/workers/build.py",
    "critic.model.fsdp_config.optimizer_offload": "engine/workers/build.py",
    "critic.model.fsdp_config.offload_policy": "engine/workers/build.py",
    "critic.model.fsdp_config.reshard_after_forward": "engine/workers/build.py",
    "critic.model.fsdp_config.model_dtype": "engine/workers/build.py",
    "actor_rollout_ref.*.log_prob_micro_batch_size": "engine/config/resolve.py",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "engine/workers/worker.py",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": "engine/workers/worker.py",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": "engine/workers/worker.py",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "engine/workers/reference.py",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": "engine/workers/reference.py",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": "engine/workers/reference.py",
    "actor_rollout_ref.rollout.name": "engine/rollout/registry.py",
    "actor_rollout_ref.rollout.temperature": "engine/rollout/hf_rollout.py",
    "actor_rollout_ref.rollout.top_k": "engine/rollout/hf_rollout.py",
    "actor_rollout_ref.rollout.top_p": "engine/rollout/hf_rollout.py",
    "actor_rollout_ref.rollout.do_sample": "engine/rollout/hf_rollout.py",
    "actor_rollout_ref.rollout.n": "engine/trainer/ppo_trainer.py",
    "actor_rollout_ref.rollout.prompt_length": "engine/rollout/vllm_rollout.py",
    "actor_rollout_ref.rollout.response_length": "engine/rollout/hf_rollout.py",
    "actor_rollout_ref.rollout.ignore_eos": "engine/rollout/hf_rollout.py",
    "actor_rollout_ref.rollout.min_new_tokens": "engine/rollout/hf_rollout.py",
    "actor_rollout_ref.rollout.dtype": "engine/rollout/vllm_rollout.py",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "engine/rollout/vllm_rollout.py",
    "actor_rollout_ref.rollout.enforce_eager": "engine/rollout/vllm_rollout.py",
    "actor_rollout_ref.rollout.free_cache_engine": "engine/rollout/vllm_rollout.py",
    "actor_rollout_ref.rollout.load_format": "engine/rollout/vllm_rollout.py",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "engine/rollout/vllm_rollout.py",
    "actor_rollout_ref.rollout.max_num_batched_tokens": "engine/rollout/vllm_rollout.py",
    "actor_rollout_ref.rollout.max_model_len": "engine/rollout/vllm_rollout.py",
    "actor_rollout_ref.rollout.max_num_seqs": "engine/rollout/vllm_rollout.py",
    "actor_rollout_ref.rollout.disable_log_stats": "engine/rollout/vllm_rollout.py",
    "actor_rollout_ref.rollout.enable_chunked_prefill": "engine/rollout/vllm_rollout.py",
    "actor_rollout_ref.rollout.engine_kwargs.vllm": "engine/rollout/vllm_rollout.py",
    "reward_model.reward_manager": "engine/main_ppo.py",
    "actor_rollout_ref.rollout.multi_turn.*": "engine/rollout/agent_loop.py",
    "reward_model.reward_kwargs.max_resp_len": "engine/main_ppo.py",
    "reward_model.reward_kwargs.overlong_buffer_cfg.enable": "engine/config/resolve.py",
    "reward_model.reward_kwargs.overlong_buffer_cfg.*": "engine/reward/manager.py",
    "algorithm.filter_groups.*": "engine/trainer/group_selection.py",
    "actor_rollout_ref.rollout.engine_kwargs.hf": "engine/rollout/hf_rollout.py",
    "algorithm.rollout_correction.rollout_*": "engine/trainer/rollout_mismatch.py",
    "actor_rollout_ref.rollout.val_kwargs.n": "engine/trainer/ppo_trainer.py",
    "actor_rollout_ref.rollout.val_kwargs.*": "engine/rollout/hf_rollout.py",
    "critic.enable": "engine/main_ppo.py",
    "critic.model.path": "engine/main_ppo.py",
    "critic.ppo_mini_batch_size": "engine/workers/critic.py",
    "critic.ppo_micro_batch_size": "engine/config/resolve.py",
    "critic.ppo_micro_batch_size_per_gpu": "engine/workers/update.py",
    "critic.forward_micro_batch_size": "engine/config/resolve.py",
    "critic.forward_micro_batch_size_per_gpu": "engine/workers/critic.py",
    "critic.ppo_max_token_len_per_gpu": "engine/workers/update.py",
    "critic.forward_max_token_len_per_gpu": "engine/workers/critic.py",
    "critic.cliprange_value": "engine/workers/critic.py",
    "reward_model.enable": "engine/main_ppo.py",
    "reward_model.model.path": "engine/main_ppo.py",
    "reward_model.micro_batch_size": "engine/workers/build.py",
    "reward_model.micro_batch_size_per_gpu": "engine/workers/build.py",
    "reward_model.max_length": "engine/workers/build.py",
    "reward_model.truncation": "engine/workers/build.py",
    "reward_model.model.fsdp_config.param_offload": "engine/workers/build.py",
    "reward_model.model.fsdp_config.optimizer_offload": "engine/workers/build.py",
    "reward_model.model.fsdp_config.offload_policy": "engine/workers/build.py",
    "reward_model.model.fsdp_config.reshard_after_forward": "engine/workers/build.py",
    "reward_model.model.fsdp_config.model_dtype": "engine/workers/build.py",
    "custom_reward_function.path": "engine/main_ppo.py",
    "custom_reward_function.name": "engine/main_ppo.py",
    "custom_reward_function.reward_kwargs": "engine/main_ppo.py",
    "algorithm.gamma": "engine/trainer/advantages.py",
    "algorithm.lam": "engine/trainer/advantages.py",
    "algorithm.adv_estimator": "engine/trainer/batches.py",
    "algorithm.norm_adv_by_std_in_grpo": "engine/trainer/advantages.py",
    "algorithm.use_kl_in_reward": "engine/trainer/ppo_trainer.py",
    "algorithm.kl_penalty": "engine/trainer/advantages.py",
    "algorithm.kl_ctrl.*": "engine/trainer/ppo_trainer.py",
    "trainer.balance_batch": "engine/trainer/ppo_trainer.py",
    "trainer.total_epochs": "engine/main_ppo.py",
    "trainer.total_training_steps": "engine/main_ppo.py",
    "trainer.project_name": "engine/loggers/tracking.py",
    "trainer.experiment_name": "engine/loggers/tracking.py",
    "trainer.logger": "engine/loggers/tracking.py",
    "trainer.log_val_generations": "engine/loggers/tracking.py",
    "trainer.rollout_data_dir": "engine/trainer/ppo_trainer.py",
    "trainer.validation_data_dir": "engine/trainer/ppo_trainer.py",
    "trainer.nnodes": "engine/workers/launch.py",
    "trainer.n_gpus_per_node": "engine/workers/launch.py",
    "trainer.save_freq": "engine/trainer/ppo_trainer.py",
    "trainer.resume_mode": "engine/trainer/checkpointing.py",
    "trainer.resume_from_path": "engine/trainer/checkpointing.py",
    "trainer.val_before_train": "engine/trainer/ppo_trainer.py",
    "trainer.val_only": "engine/trainer/ppo_trainer.py",
    "trainer.test_freq": "engine/trainer/ppo_trainer.py",
    "trainer.critic_warmup": "engine/trainer/ppo_trainer.py",
    "trainer.default_local_dir": "engine/trainer/ppo_trainer.py",
    "trainer.max_actor_ckpt_to_keep": "engine/trainer/checkpointing.py",
    "trainer.device": "engine/main_ppo.py",
    "trainer.auto_micro_batch": "engine/workers/worker.py",
    "trainer.seed": "engine/main_ppo.py",
    "trainer.export_hf_model": "engine/trainer/ppo_trainer.py",
    "trainer.dashboard_url": "engine/loggers/dashboard.py",
    "trainer.profile_steps": "engine/workers/profiling.py",
    "trainer.profile_dir": "engine/main_ppo.py",
    "ray_init.mode": "engine/workers/launch.py",
    "ray_init.num_cpus": "engine/workers/launch.py",
    "ray_init.num_gpus": "engine/workers/launch.py",
    "ray_init.address": "engine/workers/launch.py",
    "ray_init.runtime_env": "engine/workers/launch.py",
    # verl 0.9's trainer switches and the async modes' keys (checked in trainer_mode.py)
    "trainer.use_v1": "engine/config/trainer_mode.py",
    "trainer.v1.trainer_mode": "engine/config/trainer_mode.py",
    "trainer.v1.sampler.sync_refill_failed_groups": "engine/trainer/failed_groups.py",
    "trainer.v1.sampler.*": "engine/trainer/asynchronous/staleness.py",
    "trainer.v1.separate_async.*": "engine/trainer/asynchronous/staleness.py",
    "trainer.v1.colocate_async.*": "engine/trainer/asynchronous/staleness.py",
    "trainer.v1.partial_rollout": "engine/trainer/asynchronous/driver.py",
    "trainer.v1.partial_rollout_chunk": "engine/trainer/asynchronous/driver.py",
    "trainer.v1.carry_over_groups": "engine/trainer/asynchronous/driver.py",
    "actor_rollout_ref.rollout.nnodes": "engine/config/trainer_mode.py",
    "actor_rollout_ref.rollout.n_gpus_per_node": "engine/config/trainer_mode.py",
    "algorithm.rollout_correction.bypass_mode": "engine/config/trainer_mode.py",
    # the auto-stop rule: the server judges run health and cancels the run (issue 28)
    "trainer.health.*": "backend/services/health/autostop.py",
}

_CONTENTS = ["model", "optimizer", "extra"]
DEFAULT = "<the schema's default>"  # `allowed` sentinel: only the key's default value is accepted


@dataclass(frozen=True)
class Refusal:
    allowed: tuple[Any, ...] | Callable[[Any], bool] | str  # values that do what the key says, or DEFAULT
    reason: str

    def accepts(self, value: Any, default: Any) -> bool:
        if self.allowed == DEFAULT:
            return value == default
        return self.allowed(value) if callable(self.allowed) else value in self.allowed


_VLM = "vision-language models are not supported"
_RM_PADDED = "the reward model runs on padded rows (its inputs are short texts); remove the key"

# key glob -> the values accepted and why others are refused
REFUSED: dict[str, Refusal] = {
    "data.return_raw_input_ids": Refusal((False,), "the reward model reads the decoded text, not raw input ids"),
    "data.return_full_prompt": Refusal((False,), "not implemented"),
    "data.validation_shuffle": Refusal((False,), "validation prompts are used in file order"),
    "data.filter_overlong_prompts_workers": Refusal((1,), "prompts are filtered in one process"),
    "data.dataloader_num_workers": Refusal((0,), "prompts are loaded in the trainer process (no loader workers)"),
    "data.use_shm": Refusal((False,), "data loads from the filesystem"),
    "data.image_key": Refusal(("images",), _VLM),
    "data.custom_cls.*": Refusal((None,), "custom dataset classes are not supported: use parquet or jsonl files in "
                                          "verl's schema"),
    "actor_rollout_ref.hybrid_engine": Refusal((True,), "actor and rollout always share one model (hybrid engine)"),
    "*.model.external_lib": Refusal((None,), "not implemented: import your model code through trust_remote_code"),
    "*.model.enable_activation_offload": Refusal((False,), "activation offload is not implemented; use "
                                                           "enable_gradient_checkpointing=True"),
    "actor_rollout_ref.model.use_liger": Refusal((False,), "Liger kernels are not used"),
    "actor_rollout_ref.model.use_fused_kernels": Refusal((False,), "verl's fused log-prob kernels are not used "
                                                                   "(rlstudio computes log-probs in chunks)"),
    "*.strategy": Refusal(("fsdp", "fsdp2"), "both run as FSDP2"),
    "*.ulysses_sequence_parallel_size": Refusal((1,), "Ulysses sequence parallelism is not supported yet; set it to 1 "
                                                      "(sequences are sharded by FSDP2 data parallelism only)"),
    "actor_rollout_ref.actor.entropy_from_logits_with_chunking": Refusal(
        (False,), "not implemented (log-probs and entropy are computed per micro-batch)"),
    "*.checkpoint.contents": Refusal(lambda v: sorted(v) == sorted(_CONTENTS),
                                     "a checkpoint always holds model, optimizer and extra (exact resume needs all "
                                     "three); the final HF model is trainer.export_hf_model"),
    "*.checkpoint.load_contents": Refusal(lambda v: v is None or sorted(v) == sorted(_CONTENTS),
                                          "a resume always loads model, optimizer and extra"),
    "*.fsdp_config.wrap_policy.min_num_params": Refusal((0,), "FSDP2 units are the decoder layers (the whole model "
                                                              "on one worker); custom wrap policies are not supported"),
    "*.fsdp_config.wrap_policy.transformer_layer_cls_to_wrap": Refusal(
        (None,), "FSDP2 units are the decoder layers (the whole model on one worker); custom wrap policies are not "
                 "supported"),
    "*.fsdp_config.fsdp_size": Refusal((-1,), "hybrid sharding (HSDP) is not supported: every worker is one shard "
                                              "group"),
    "*.fsdp_config.forward_prefetch": Refusal((False,), "FSDP2 forward prefetch is not configured"),
    "*.fsdp_config.mixed_precision": Refusal((None,), "compute is bf16 on GPU (fp32 on CPU) with fp32 gradient "
                                                      "reduction; the weights' dtype is fsdp_config.model_dtype"),
    "actor_rollout_ref.ref.fsdp_config.optimizer_offload": Refusal((False,), "the reference has no optimizer"),
    "critic.rollout_n": Refusal((None,), "derived from actor_rollout_ref.rollout.n"),
    "critic.model.tokenizer_path": Refusal((None,), "the critic uses the actor's tokenizer (data.tokenizer)"),
    "reward_model.model.input_tokenizer": Refusal((None,), "the reward model scores the decoded text with its own "
                                                           "tokenizer; no input tokenizer is needed"),
    "reward_model.model.use_remove_padding": Refusal((False,), _RM_PADDED),
    "reward_model.model.trust_remote_code": Refusal((False,), "the reward model loads with trust_remote_code=False"),
    "reward_model.use_dynamic_bsz": Refusal((False,), "the reward model uses micro_batch_size_per_gpu"),
    "reward_model.forward_max_token_len_per_gpu": Refusal((32768,), "the reward model uses micro_batch_size_per_gpu"),
    "reward_model.launch_reward_fn_async": Refusal((False,), "rewards are computed synchronously"),
    "actor_rollout_ref.rollout.mode": Refusal(("sync",), "the rollout runs synchronously inside the workers; verl's "
                                                         "async (agent-loop server) mode is not implemented"),
    "actor_rollout_ref.rollout.calculate_log_probs": Refusal((True,), "the vllm and static-cache rollouts always "
                                                                      "return their log-probs; no switch to skip them"),
    "algorithm.rollout_correction.loss_type": Refusal(("ppo_clip",), "only the clipped PPO loss is implemented"),
    "algorithm.use_pf_ppo": Refusal((False,), "PF-PPO (reward-weighted resampling) is not implemented"),
    "trainer.default_hdfs_dir": Refusal((None,), "HDFS upload is not supported: put trainer.default_local_dir on a "
                                                 "shared filesystem"),
    "trainer.del_local_ckpt_after_load": Refusal((False,), "checkpoints are never deleted after a resume"),
    "trainer.max_critic_ckpt_to_keep": Refusal((None,), "actor and critic share one global_step_N folder; "
                                                        "trainer.max_actor_ckpt_to_keep prunes whole folders"),
    "trainer.ray_wait_register_center_timeout": Refusal((300,), "workers start through Ray directly; there is no "
                                                                "register center to wait for"),
    "ray_init.timeline_json_file": Refusal((None,), "Ray timelines are not written"),
}


def _get(cfg, key: str) -> Any:
    node = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


def refusal_of(key: str) -> Refusal | None:
    for pattern, refusal in REFUSED.items():
        if fnmatch.fnmatchcase(key, pattern):
            return refusal
    return None


def refuse_unsupported(cfg, keys: list[str]) -> None:
    """A ConfigError naming the first key whose value rlstudio does not implement, and why."""
    defaults = type(cfg)()
    for key in keys:
        refusal = refusal_of(key)
        if refusal is not None:
            value = _get(cfg, key)
            if not refusal.accepts(value, _get(defaults, key)):
                spelled = ", ".join(verl_spellings(key))
                raise ConfigError(f"{key}={value!r}{f' (verl 0.9: {spelled})' if spelled else ''} is not supported: "
                                  f"{refusal.reason}.", key)
    _refuse_combinations(cfg)


def _refuse_combinations(cfg) -> None:
    for role, fsdp in (("actor_rollout_ref.actor", cfg.actor_rollout_ref.actor.fsdp_config),
                       ("critic.model", cfg.critic.model.fsdp_config)):
        if fsdp.param_offload != fsdp.optimizer_offload:
            raise ConfigError(
                f"{role}.fsdp_config.param_offload={fsdp.param_offload} with optimizer_offload="
                f"{fsdp.optimizer_offload}: FSDP2's CPU offload moves parameters, gradients and optimizer state "
                "together (the step runs on the CPU), so one cannot be offloaded without the other; set both (or "
                "offload_policy=True) or neither.", f"{role}.fsdp_config.param_offload")
