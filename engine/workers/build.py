"""Building the roles' models on a worker: loading (transformers), precision, LoRA, torch.compile and FSDP2
sharding, and the optimizers. `RoleBuilder` is what the colocated worker (worker.py) builds its actor, reference,
critic and reward model with, and what separate_async's rollout process (behaviour/child.py) builds its behaviour
copy with, so that the copy is loaded exactly as the worker's own would be.
"""
from __future__ import annotations

import os

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

from engine.adapters import lora
from engine.distributed.fsdp import DTYPES, decoder_layers, fsdp_modules, shard_model
from engine.reward.reward_model import RewardModelScorer
from engine.workers import packing
from engine.workers.actor import Actor
from engine.workers.critic import Critic
from engine.workers.optim import build_optimizer, build_scheduler
from engine.workers.reference import Reference


def load_tokenizer(cfg):
    """The run's tokenizer (data.tokenizer, else the actor model's), as every worker and the rollout process load it."""
    model = cfg.actor_rollout_ref.model
    return AutoTokenizer.from_pretrained(os.path.expanduser(cfg.data.tokenizer or model.path),
                                         trust_remote_code=model.trust_remote_code)


def compile_layers(model) -> None:
    """`use_torch_compile` (GPU only; on by default, as in verl): each decoder layer's forward goes through torch.compile (one compiled graph shared
    by the identical layers); the module call around it, with FSDP2's and checkpointing's hooks, stays eager."""
    for layer in decoder_layers(model):
        layer.forward = torch.compile(layer.forward)


def default_packing(cfg, device_type: str) -> set[str]:
    """use_remove_padding left unset: packed on GPU (faster where rows differ in length), padded on CPU. Returns the
    roles whose packing is only this default: a model that cannot pack then falls back to padding instead of failing
    (RoleBuilder.load_lm)."""
    auto = set()
    for role, model_cfg in (("actor", cfg.actor_rollout_ref.model), ("critic", cfg.critic.model)):
        if model_cfg.use_remove_padding is None:
            model_cfg.use_remove_padding = device_type == "cuda"
            if device_type == "cuda":
                auto.add(role)
    return auto


def mixed_precision(device_type: str) -> tuple[torch.dtype, torch.dtype | None]:
    """(master weight dtype, compute dtype): fp32 masters; bf16 compute on GPU."""
    if device_type == "cuda":
        return torch.float32, torch.bfloat16
    return torch.float32, None


def behaviour_dtype(cfg, device_type: str) -> torch.dtype:
    """The dtype the actor computes in, which the async modes' behaviour copy holds: bf16 on GPU (the gathered
    weights' under mixed precision); on the CPU the actor's own (fp32, or fsdp_config.model_dtype)."""
    master, compute = mixed_precision(device_type)
    model_dtype = cfg.actor_rollout_ref.actor.fsdp_config.model_dtype
    return compute or (DTYPES[model_dtype] if model_dtype else master)


class RoleBuilder:
    """Loads and prepares one worker's models. `mesh`/`world`: the worker's FSDP2 mesh (None where nothing is sharded:
    the rollout process); `auto_packing`: default_packing's roles; `total_steps`: the schedulers' length."""

    def __init__(self, cfg, device: torch.device, mesh=None, world: int = 1, total_steps: int = 0,
                 auto_packing: set[str] | None = None):
        self.cfg, self.device, self.mesh, self.world = cfg, device, mesh, world
        self.device_type = device.type
        self.total_steps = total_steps
        self.auto_packing = auto_packing or set()

    def load_lm(self, path: str, model_cfg, cls_name: str = "causal", dtype=torch.float32, packed_key: str = ""):
        """`packed_key`: the config key that turned use_remove_padding on (attention that also runs packed
        rows, engine/workers/packing.py); empty for plain SDPA."""
        path = os.path.expanduser(path)
        config = AutoConfig.from_pretrained(path, trust_remote_code=model_cfg.trust_remote_code)
        for k, v in (model_cfg.override_config or {}).items():
            setattr(config, k, v)
        attn = "sdpa"
        if packed_key:
            packing.register()  # in this worker process, before the model resolves its attention
            attn = packing.ATTN_NAME
        if cls_name == "value":
            config.num_labels = 1
            config.classifier_dropout = 0.0  # a value head must not be noisy
            model = AutoModelForTokenClassification.from_pretrained(path, config=config, dtype=dtype,
                                                                    attn_implementation=attn)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=dtype, attn_implementation=attn)
        if packed_key:
            role = "critic" if packed_key.startswith("critic.") else "actor"
            try:
                packing.check_packable(type(model), model.config, packed_key)
            except ValueError:
                if role not in self.auto_packing:
                    raise
                # packing was only the GPU default: this model runs padded (its attention name is SDPA outside
                # packed calls, so the loaded model is right as it is)
                (self.cfg.critic.model if role == "critic" else self.cfg.actor_rollout_ref.model).use_remove_padding = False
        return model

    def packed_key(self, role: str) -> str:
        """The use_remove_padding key of a role when it is on, else "" (the reference follows the actor's model)."""
        if role == "critic":
            return "critic.model.use_remove_padding" if self.cfg.critic.model.use_remove_padding else ""
        on = self.cfg.actor_rollout_ref.model.use_remove_padding
        return "actor_rollout_ref.model.use_remove_padding" if on else ""

    def shard(self, model, fsdp_cfg, compute_dtype):
        if fsdp_cfg.model_dtype:
            model = model.to(DTYPES[fsdp_cfg.model_dtype])
        # One worker: nothing to reshard over; keeping the gathered layer between forward and backward saves an
        # all-gather per layer and micro-batch (the backward still reshards, so updated weights are re-gathered).
        return shard_model(model, self.mesh, param_dtype=compute_dtype,
                           reshard_after_forward=fsdp_cfg.reshard_after_forward and self.world > 1,
                           # FSDP2 offloads parameters, gradients and optimizer state together (the config
                           # refuses param_offload without optimizer_offload on a trained role)
                           cpu_offload=(fsdp_cfg.offload_policy or fsdp_cfg.param_offload
                                        or fsdp_cfg.optimizer_offload)
                           and self.device_type == "cuda")

    def actor(self) -> Actor:
        actor_rollout_ref = self.cfg.actor_rollout_ref
        master, compute = mixed_precision(self.device_type)
        model = self.load_lm(actor_rollout_ref.model.path, actor_rollout_ref.model, dtype=master,
                             packed_key=self.packed_key("actor"))
        if actor_rollout_ref.model.enable_gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = True
        if lora.enabled(actor_rollout_ref.model):
            model = lora.wrap(model, actor_rollout_ref.model)  # before compile and sharding: they see its layers
        if actor_rollout_ref.actor.use_torch_compile and self.device_type == "cuda":
            compile_layers(model)
        module = self.shard(model, actor_rollout_ref.actor.fsdp_config, compute)
        if lora.is_lora(module):
            # peft's generate calls the wrapped HF model, not the FSDP root; FSDP2 initialises its units lazily
            # on the root's first forward and refuses an inner unit run first (2+ workers). One token through the
            # root, on every rank at build time, does that initialisation.
            with torch.no_grad():
                module(input_ids=torch.zeros(1, 1, dtype=torch.long, device=self.device), use_cache=False)
            # and back to the sharded parameters: a unit that keeps its gathered weights after forward (the root;
            # every unit with one worker) would leave its unsharded tensors registered, the optimizer below would
            # hold those, and the adapter would never change (the gradients reach the sharded ones)
            for unit in fsdp_modules(module):
                unit.reshard()
        # only what requires gradients: with LoRA the adapter, so AdamW keeps state for it alone
        optimizer = build_optimizer([p for p in module.parameters() if p.requires_grad],
                                    actor_rollout_ref.actor.optim, self.device_type)
        scheduler = build_scheduler(optimizer, actor_rollout_ref.actor.optim, self.total_steps)
        return Actor(module, optimizer, scheduler, actor_rollout_ref.actor,
                     temperature=actor_rollout_ref.rollout.temperature, rollout_n=actor_rollout_ref.rollout.n,
                     world=self.world, remove_padding=actor_rollout_ref.model.use_remove_padding)

    def reference(self, actor_module) -> Reference:
        actor_rollout_ref = self.cfg.actor_rollout_ref
        if lora.enabled(actor_rollout_ref.model):  # the base model is the actor with its adapter off: no copy
            return Reference(actor_module, actor_rollout_ref.ref, temperature=actor_rollout_ref.rollout.temperature,
                             remove_padding=actor_rollout_ref.model.use_remove_padding, adapter_off=True)
        dtype = torch.bfloat16 if self.device_type == "cuda" else torch.float32
        model = self.load_lm(actor_rollout_ref.model.path, actor_rollout_ref.model, dtype=dtype,
                             packed_key=self.packed_key("ref"))
        model.requires_grad_(False)
        if actor_rollout_ref.ref.use_torch_compile and self.device_type == "cuda":
            compile_layers(model)
        module = self.shard(model, actor_rollout_ref.ref.fsdp_config, None)
        return Reference(module, actor_rollout_ref.ref, temperature=actor_rollout_ref.rollout.temperature,
                         remove_padding=actor_rollout_ref.model.use_remove_padding)

    def critic(self) -> Critic:
        c = self.cfg.critic
        master, compute = mixed_precision(self.device_type)
        model = self.load_lm(c.model.path, c.model, cls_name="value", dtype=master,
                             packed_key=self.packed_key("critic"))
        if c.model.enable_gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora.enabled(c.model):
            model = lora.wrap(model, c.model, value_head=True)
        if c.use_torch_compile and self.device_type == "cuda":
            compile_layers(model)  # eager, its small micro-batches were launch-bound: twice the actor's update time
        module = self.shard(model, c.model.fsdp_config, compute)
        optimizer = build_optimizer([p for p in module.parameters() if p.requires_grad], c.optim, self.device_type)
        scheduler = build_scheduler(optimizer, c.optim, self.total_steps)
        return Critic(module, optimizer, scheduler, c, rollout_n=self.cfg.actor_rollout_ref.rollout.n,
                      world=self.world)

    def reward_model(self) -> RewardModelScorer:
        """The reward model, sharded like the reference (its own tokenizer, micro-batches and max length)."""
        rm = self.cfg.reward_model
        micro = rm.micro_batch_size_per_gpu or (max(1, rm.micro_batch_size // self.world) if rm.micro_batch_size
                                                else 8)
        compute = torch.bfloat16 if self.device_type == "cuda" else None
        return RewardModelScorer(rm.model.path, device=self.device, micro_batch_size=micro, max_length=rm.max_length,
                                 truncation=rm.truncation,
                                 wrap=lambda model: self.shard(model, rm.model.fsdp_config, compute))

    def behaviour_module(self) -> torch.nn.Module:
        """The async modes' behaviour copy: the actor's model loaded as the actor's is, as a plain module with the
        full weights in the actor's compute dtype on this device (no sharding: generation runs no collective, so
        it cannot interleave with the update's on several workers); the same in the worker and in a rollout
        process."""
        arr = self.cfg.actor_rollout_ref
        return plain_copy(self.load_lm(arr.model.path, arr.model, dtype=mixed_precision(self.device_type)[0]),
                          self.device, behaviour_dtype(self.cfg, self.device_type))


def plain_copy(module: torch.nn.Module, device: torch.device, dtype: torch.dtype | None) -> torch.nn.Module:
    """The behaviour copy from a freshly loaded model: its parameters cast to `dtype` (None: as loaded), then moved to
    `device`. Buffers stay as loaded (FSDP's mixed precision casts only parameters, so the actor's rotary tables are
    the loaded ones too); requires_grad stays as loaded (see BehaviourPolicy.__init__)."""
    if dtype is not None:
        with torch.no_grad():
            for param in module.parameters():  # cast on the CPU: half the bytes to move in bf16
                param.data = param.data.to(dtype)
    return module.to(device)
