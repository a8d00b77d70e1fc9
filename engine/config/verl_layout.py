"""verl 0.9's spelling of the schema, and verl's keys that rlstudio refuses by name.

The schema (schema.py) keeps the seed-era layout, which is also the canonical form a resolved config shows.
verl 0.9 moved some keys (`critic.fsdp.*`, `reward.*`, `ray_kwargs.ray_init.*`, `optim.clip_grad`, ...):
`ALIASES` maps each moved prefix to its canonical place, so both spellings reach one field. Keys verl has and
rlstudio does not (other back ends, agent loops, profilers, ...) are refused with the reason in `UNSUPPORTED`
instead of a bare "unknown key". tests/unit/test_verl_layout.py checks both against verl 0.9.1's own config.
"""
from __future__ import annotations

import fnmatch
from typing import Any

from engine.config.errors import ConfigError

# verl 0.9 prefix -> canonical prefix; the most specific entry first (the first match wins)
ALIASES: tuple[tuple[str, str], ...] = (
    ("critic.fsdp.ulysses_sequence_parallel_size", "critic.ulysses_sequence_parallel_size"),
    ("critic.fsdp.", "critic.model.fsdp_config."),
    ("critic.optim.clip_grad", "critic.grad_clip"),
    ("critic.checkpoint.save_contents", "critic.checkpoint.contents"),
    ("actor_rollout_ref.actor.optim.clip_grad", "actor_rollout_ref.actor.grad_clip"),
    ("actor_rollout_ref.actor.checkpoint.save_contents", "actor_rollout_ref.actor.checkpoint.contents"),
    ("actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size",
     "actor_rollout_ref.actor.ulysses_sequence_parallel_size"),
    ("actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size",
     "actor_rollout_ref.ref.ulysses_sequence_parallel_size"),
    ("actor_rollout_ref.actor.fsdp_config.use_torch_compile", "actor_rollout_ref.actor.use_torch_compile"),
    ("actor_rollout_ref.ref.fsdp_config.use_torch_compile", "actor_rollout_ref.ref.use_torch_compile"),
    ("actor_rollout_ref.actor.fsdp_config.entropy_from_logits_with_chunking",
     "actor_rollout_ref.actor.entropy_from_logits_with_chunking"),
    ("actor_rollout_ref.actor.use_fused_kernels", "actor_rollout_ref.model.use_fused_kernels"),
    ("actor_rollout_ref.actor.use_remove_padding", "actor_rollout_ref.model.use_remove_padding"),
    ("ray_kwargs.ray_init.", "ray_init."),
    ("ray_kwargs.timeline_json_file", "ray_init.timeline_json_file"),
    ("reward.custom_reward_function.", "custom_reward_function."),
    # the dapo reward manager's kwargs (verl's DAPO scripts) before the custom function's
    ("reward.reward_kwargs.overlong_buffer_cfg.", "reward_model.reward_kwargs.overlong_buffer_cfg."),
    ("reward.reward_kwargs.max_resp_len", "reward_model.reward_kwargs.max_resp_len"),
    ("reward.reward_kwargs.", "reward_model.reward_kwargs."),  # the reward manager's (DAPO's overlong buffer)
    ("reward.reward_manager.name", "reward_model.reward_manager"),
    ("reward.reward_model.model_path", "reward_model.model.path"),
    ("reward.reward_model.enable", "reward_model.enable"),
)

_OTHER_BACKEND = "rlstudio trains with FSDP2 only (no Megatron, TorchTitan, VeOmni, Automodel or NPU back end)"
_AGENT = ("this multi-turn option of verl is not implemented: rlstudio's multi-turn rollout reads "
          "actor_rollout_ref.rollout.multi_turn.{enable,max_assistant_turns,max_user_turns,tool_config_path,format,"
          "max_tool_response_length}; tools are declared in the tool_config_path YAML")
_ROLLOUT_KNOB = ("this rollout option of verl has no counterpart in rlstudio's hf/vllm rollout; a vLLM engine "
                 "argument can be passed as +actor_rollout_ref.rollout.engine_kwargs.vllm.<name>=<value>")
_PROFILER = "verl's profilers are not available: use trainer.profile_steps=[N] (torch.profiler per worker phase)"
_SERVED_RM = ("rlstudio's reward model is a sequence classifier scored in the trainer "
              "(reward_model.enable, reward_model.model.path); a vLLM-served reward model is not supported")

# (glob pattern over the dotted key, reason); checked only for keys the schema does not have
UNSUPPORTED: tuple[tuple[str, str], ...] = (
    ("*megatron*", _OTHER_BACKEND), ("*torchtitan*", _OTHER_BACKEND), ("*veomni*", _OTHER_BACKEND),
    ("*automodel*", _OTHER_BACKEND), ("*npu*", _OTHER_BACKEND), ("*.turbo_config.*", _OTHER_BACKEND),
    ("*profiler*", _PROFILER), ("*profile*", _PROFILER), ("*prometheus*", _PROFILER), ("*.trace.*", _PROFILER),
    ("actor_rollout_ref.rollout.multi_turn*", _AGENT), ("actor_rollout_ref.rollout.agent.*", _AGENT),
    ("data.tool_config_path", _AGENT), ("data.function_tool_path", _AGENT),
    ("*lora*", "this LoRA option is not supported (supported: lora_rank, lora_alpha, target_modules, exclude_modules, "
               "lora_adapter_path)"),
    ("*.qat.*", "quantization-aware training is not supported"),
    ("*quantization*", "quantized rollouts are not supported"),
    ("*.mtp*", "multi-token prediction is not supported"),
    ("*router_replay*", "MoE router replay is not supported"), ("*moe*", "MoE options are not supported"),
    ("*expert_parallel_size", "expert parallelism is not supported"),
    ("*disaggregation*", "prefill/decode disaggregation is not supported"),
    ("*checkpoint_engine*", "weights go from the FSDP shards to the rollout in place; no checkpoint engine"),
    ("actor_rollout_ref.rollout.engine_kwargs.sglang*", "the sglang rollout is not supported (hf or vllm)"),
    ("actor_rollout_ref.rollout.engine_kwargs.trtllm*", "the TensorRT-LLM rollout is not supported (hf or vllm)"),
    ("distillation.*", "on-policy distillation is not implemented"),
    ("transfer_queue.*", "verl's TransferQueue is not used: the async modes hand each generated batch from the "
                         "rollout thread to the trainer through an in-process queue on the driver "
                         "(engine/trainer/asynchronous/driver.py), and batches reach the workers through the worker "
                         "group's calls (Ray or in-process)"),
    ("skip.*", "rollout dumping/skipping is not implemented"),
    ("trainer.v1.sync*", "verl's sync mode has no options"),
    ("trainer.v1.separate_async.hybrid_rollout.*", "step switching (lending the trainer's devices to the rollout "
                                                   "between steps) is not built: rlstudio's rollout generates on its "
                                                   "own copy of the policy beside the trainer"),
    ("trainer.v1.sampler.custom_sampler*", "custom samplers are not supported: the sampler is "
                                           "trainer.v1.sampler.max_off_policy_threshold/max_off_policy_strategy"),
    ("trainer.v1.sampler.sampler_kwargs*", "custom samplers are not supported: the sampler is "
                                           "trainer.v1.sampler.max_off_policy_threshold/max_off_policy_strategy"),
    ("trainer.v1*", "this option of verl's v1 trainer is not implemented (rlstudio reads trainer.v1.trainer_mode, "
                    "trainer.v1.sampler.max_off_policy_threshold/max_off_policy_strategy/sync_refill_failed_groups, "
                    "trainer.v1.{colocate_async,separate_async}.num_warmup_batches and "
                    "trainer.v1.separate_async.parameter_sync_step)"),
    ("trainer.esi_redundant_time", "elastic-instance checkpointing is not supported"),
    ("*sandbox_fusion*", "code-execution (sandbox) rewards are not supported"),
    ("reward.reward_model.*", _SERVED_RM), ("reward_model.rollout.*", _SERVED_RM),
    ("reward_model.enable_resource_pool", _SERVED_RM), ("reward_model.n_gpus_per_node", _SERVED_RM),
    ("reward_model.nnodes", _SERVED_RM), ("reward_model.num_workers", _SERVED_RM),
    ("reward_model.reward_loop_*", _SERVED_RM),
    ("reward.reward_manager.*", "the reward managers are naive and dapo (reward.reward_manager.name); a custom "
                                "scoring function: custom_reward_function.path/name"),
    ("reward.num_workers", "rewards are computed in the trainer process; no reward workers"),
    ("*.fsdp_config.use_orig_params", "FSDP2 has no use_orig_params (FSDP1 only)"),
    ("*.fsdp_config.seed", "the seed is trainer.seed"), ("*.fsdp.seed", "the seed is trainer.seed"),
    ("*full_determinism*", "deterministic mode is not implemented"),
    ("*.fsdp_config.*", "this FSDP option of verl is not implemented in rlstudio's FSDP2 set-up"),
    ("*.fsdp.*", "this FSDP option of verl is not implemented in rlstudio's FSDP2 set-up"),
    ("*.optim.optimizer*", "the optimizer is torch's AdamW (fused on GPU); other optimizers are not supported"),
    ("*.optim.override_optimizer_config", "the optimizer is torch's AdamW; set lr, betas, weight_decay"),
    ("*.optim.zero_indexed_step", "the lr schedule counts steps as verl does by default (from 0)"),
    ("*.optim.*", "this optimizer option of verl is not implemented"),
    ("*.checkpoint.strict", "checkpoints load strictly"),
    ("*data_loader_seed", "the data order follows data.seed / trainer.seed"),
    ("*.rollout_n", "derived from actor_rollout_ref.rollout.n"),
    ("*.pad_to_length*", "padding is by micro-batch (or packed with use_remove_padding)"),
    ("*entropy_checkpointing", "not implemented"), ("*entropy_from_logits_chunk_size", "not implemented"),
    ("*tau_pos", "SAPO's soft gate is not implemented"), ("*tau_neg", "SAPO's soft gate is not implemented"),
    ("*freeze_vision_tower", "vision-language models are not supported"),
    ("*image*", "vision-language models are not supported"), ("*video*", "vision-language models are not supported"),
    ("*audio*", "vision-language models are not supported"), ("*multi_modal*", "vision-language models are not supported"),
    ("*mm_processor*", "vision-language models are not supported"),
    ("*.policy_loss.clip_cov*", "the clip-cov policy loss is not implemented"),
    ("*.policy_loss.kl_cov*", "the kl-cov policy loss is not implemented"),
    ("*.policy_loss.ppo_kl_coef", "the ppo-kl policy loss is not implemented"),
    ("*.policy_loss.dro_beta", "the DRO policy loss is not implemented"),
    ("*calculate_sum_pi_squared", "not implemented"), ("*use_prefix_grouper", "prefix grouping is not implemented"),
    ("*.calculate_entropy", "entropy is computed when entropy_coeff != 0 or for the on-policy metrics"),
    ("*.model.hf_config_path", "the model's config is read from model.path"),
    ("*.model.tokenizer_path", "the tokenizer is data.tokenizer (default: the model's)"),
    ("*.model.use_shm", "models load from the filesystem"), ("data.use_shm", "data loads from the filesystem"),
    ("*fused_kernel_options*", "fused kernels are not implemented"), ("*tiled_mlp*", "tiled MLP is not implemented"),
    ("actor_rollout_ref.nccl_timeout", "collectives use torch's default timeout"),
    ("actor_rollout_ref.rollout.*", _ROLLOUT_KNOB),
    ("data.gen_batch_size", "a generation batch is data.train_batch_size prompts"),
    ("data.train_max_samples", "not implemented (data.val_max_samples is)"),
    ("data.apply_chat_template_kwargs", "the chat template is applied with its defaults"),
    ("data.continuous_token*", "not implemented"), ("data.image_patch_size", "vision-language models are not supported"),
    ("algorithm.pf_ppo.*", "PF-PPO (reward-weighted resampling) is not implemented"),
    ("global_profiler.*", _PROFILER),
    ("actor_rollout_ref.ref.entropy_from_logits_with_chunking", "not implemented"),
    ("*exclude_modules", "LoRA is not supported yet: all weights are trained"),
    ("critic.model.use_liger", "Liger kernels are not used"), ("critic.model.use_fused_kernels", "not used"),
    ("critic.model.custom_chat_template", "the critic reads the actor's tokens; no chat template of its own"),
    ("trainer.checkpoint_callback_class", "checkpoint callbacks are not supported"),
    ("algorithm.filter_groups.max_inflight_gen_batches", "generation batches run one after another"),
    ("algorithm.rollout_correction.*", "rollout correction is not implemented yet"),
)


def canonical_key(key: str) -> str:
    """The canonical (seed-era) spelling of a dotted key; keys of neither layout come back unchanged."""
    for old, new in ALIASES:
        if key == old or (old.endswith(".") and key.startswith(old)):
            return new + key[len(old):]
        if key.startswith(old + "."):
            return new + key[len(old):]
    return key


def verl_spellings(key: str) -> list[str]:
    """verl 0.9's spellings of a canonical key (for messages)."""
    out = []
    for old, new in ALIASES:
        if key == new:
            out.append(old)
        elif new.endswith(".") and key.startswith(new):
            out.append(old + key[len(new):])
    return out


def unsupported_reason(key: str) -> str | None:
    for pattern, reason in UNSUPPORTED:
        if fnmatch.fnmatchcase(key, pattern):
            return reason
    return None


def canonical_tree(flat: dict[str, Any], source: str = "") -> dict[str, Any]:
    """A flat {key: value} with every key in its canonical spelling; two spellings of one key with different
    values are an error naming both."""
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in flat.items():
        canon = canonical_key(key)
        if canon in out and out[canon] != value and spelled[canon] != key:
            raise ConfigError(f"'{spelled[canon]}' and '{key}' are two spellings of one key ({canon}) with different "
                              f"values ({out[canon]!r} and {value!r}){source};", canon, "keep one.")
        out[canon] = value
        spelled[canon] = key
    return out
