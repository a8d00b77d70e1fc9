"""The colocated worker: one process per GPU (or per CPU worker) hosting every role's shard.

The roles are their own modules: the actor (actor.py), the reference (reference.py) and the critic (critic.py)
in this folder, the rollout in engine/rollout/, the reward model in engine/reward/reward_model.py. Here they are
built (loaded, sharded, given their optimizers) and called: Actor + Rollout share one module (the rollout
generates with the actor's weights), the Reference and the Critic live beside them. The driver calls these
methods through `WorkerGroup` (engine/distributed/worker_group.py); each data method takes this worker's chunk
of the batch and returns (Batch, metrics).
"""
from __future__ import annotations

import contextlib
import os
import socket
import time
import warnings

import torch
import torch.distributed as dist

from engine.adapters import lora
from engine.checkpoint.export import hf_class, write_hf_model
from engine.checkpoint.sharded import background_writer, load_role, save_role
from engine.distributed.fsdp import DTYPES, fsdp_modules, full_state_dict, shard_model
from engine.protocol import Batch
from engine.rollout import freshness
from engine.rollout.hf_rollout import HFRollout, eos_ids
from engine.workers import packing
from engine.workers.actor import Actor
from engine.workers.critic import Critic
from engine.workers.optim import build_optimizer, build_scheduler
from engine.workers.profiling import maybe_profile
from engine.workers.reference import Reference


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def entropy_sums(entropy: torch.Tensor, batch: Batch) -> dict[str, list[float]]:
    """Token-weighted entropy parts; the driver sums them over workers into actor/entropy."""
    mask = batch["response_mask"].to(entropy.device).float()
    return {"_entropy_sum": [float((entropy * mask).sum())], "_entropy_count": [float(mask.sum())]}


def compile_layers(model) -> None:
    """`use_torch_compile` (GPU only; on by default, as in verl): each decoder layer's forward goes through torch.compile (one compiled graph shared
    by the identical layers); the module call around it, with FSDP2's and checkpointing's hooks, stays eager."""
    from engine.distributed.fsdp import decoder_layers

    for layer in decoder_layers(model):
        layer.forward = torch.compile(layer.forward)


def load_tokenizer(cfg):
    """The run's tokenizer (data.tokenizer, else the actor model's), as every worker and the rollout process load it."""
    from transformers import AutoTokenizer

    model = cfg.actor_rollout_ref.model
    return AutoTokenizer.from_pretrained(os.path.expanduser(cfg.data.tokenizer or model.path),
                                         trust_remote_code=model.trust_remote_code)


class TrainWorker:
    def __init__(self, rank: int, world: int, cfg, total_steps: int, device: str, num_threads: int = 1):
        self.rank, self.world, self.cfg = rank, world, cfg
        self.total_steps = total_steps
        self.device_type = device
        self._writes: list = []  # background checkpoint writes still running (futures)
        self._ckpt_groups: dict = {}  # role -> the gloo group of its background writer
        self._ckpt_writers: dict = {}  # role -> its background writer (keeps the staging buffers between saves)
        if device == "cpu":
            torch.set_num_threads(max(1, num_threads))
        # use_remove_padding left unset: packed on GPU (faster where rows differ in length), padded on CPU; a model
        # that cannot pack then falls back to padding instead of failing (see _load_lm)
        self.auto_packing = set()
        for role, model_cfg in (("actor", cfg.actor_rollout_ref.model), ("critic", cfg.critic.model)):
            if model_cfg.use_remove_padding is None:
                model_cfg.use_remove_padding = device == "cuda"
                if device == "cuda":
                    self.auto_packing.add(role)
        # Our forward passes only slice model outputs out of place, which this FSDP2 warning is about.
        warnings.filterwarnings("ignore", message=".*returned a view tensor.*")

    # ---- set-up ------------------------------------------------------------------------------------
    def address(self) -> tuple[str, int]:
        try:
            import ray

            ip = ray.util.get_node_ip_address()
        except Exception:  # noqa: BLE001 - outside Ray
            ip = "127.0.0.1"
        return ip, free_port()

    def init(self, master_addr: str, master_port: int, uses_ref: bool) -> dict:
        from torch.distributed.device_mesh import init_device_mesh

        cfg = self.cfg
        if self.device_type == "cuda":
            torch.cuda.set_device(0)  # Ray exposes exactly one GPU to each worker
            self.device = torch.device("cuda", 0)
            backend = "cpu:gloo,cuda:nccl"
        else:
            self.device = torch.device("cpu")
            backend = "gloo"
        os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port))
        dist.init_process_group(backend, rank=self.rank, world_size=self.world,
                                init_method=f"tcp://{master_addr}:{master_port}")
        self.mesh = init_device_mesh(self.device_type, (self.world,))
        self.tokenizer = load_tokenizer(cfg)
        torch.manual_seed(cfg.trainer.seed)  # identical initial weights (e.g. a new value head) on every rank
        self.actor = self._build_actor()
        self.reference = self._build_reference() if uses_ref else None
        self.critic = self._build_critic() if cfg.critic.enable else None
        self.reward_model = self._build_reward_model() if cfg.reward_model.enable else None
        self.rollout = self._build_rollout()
        # after each sync: did the update reach the rollout's own weights (vLLM; None for transformers' generate)
        self.freshness = freshness.for_rollout(self.actor_module, self.rollout)
        torch.manual_seed(cfg.trainer.seed * 1000 + self.rank)  # different samples on different ranks
        micro = self._auto_micro_batches() if cfg.trainer.auto_micro_batch and self.device_type == "cuda" else None
        actor = lora.parameter_counts(self.actor_module)
        # the critic's counts beside the actor's (a LoRA critic trains its adapter and value head only)
        critic = lora.parameter_counts(self.critic.module) if self.critic is not None else None
        return {"rank": self.rank, "device": str(self.device),
                "device_name": torch.cuda.get_device_name(0) if self.device_type == "cuda" else "cpu",
                "n_params": actor["total"], "n_trainable_params": actor["trainable"],
                **({"critic_n_params": critic["total"], "critic_n_trainable_params": critic["trainable"]}
                   if critic else {}), "micro_batching": micro}

    def _auto_micro_batches(self) -> str:
        """trainer.auto_micro_batch (engine/workers/auto_micro.py): token budgets from free GPU memory and
        checkpointing off where memory does not need it; the choice is printed and returned."""
        from engine.workers import auto_micro

        trainable = sum(p.numel() for p in self.actor_module.parameters())
        if self.critic is not None:
            trainable += sum(p.numel() for p in self.critic.module.parameters())
        free, total = torch.cuda.mem_get_info()
        # what the device has in use, not what torch's allocator counts: a sleeping vLLM engine keeps its tensors
        # allocated in the allocator's books while their memory is returned to the device (sleep mode)
        rollout = self.cfg.actor_rollout_ref.rollout
        sleeps = rollout.name == "vllm" and bool(rollout.free_cache_engine)
        used = total - free if sleeps else torch.cuda.memory_allocated()
        chosen = auto_micro.plan(self.cfg, auto_micro.Shape.of(self.actor_module.config), total, used, trainable)
        auto_micro.apply(self.cfg, chosen)
        # the actor's and critic's micro-batch sizes follow the config (UpdatedModel reads them at each update)
        actor_rollout_ref = self.cfg.actor_rollout_ref
        for module, on in ((self.actor_module, actor_rollout_ref.model.enable_gradient_checkpointing),
                           (self.critic.module if self.critic else None, self.cfg.critic.model.enable_gradient_checkpointing)):
            if module is not None and not on and getattr(module, "is_gradient_checkpointing", False):
                module.gradient_checkpointing_disable()
        text = chosen.describe()
        if self.rank == 0:
            print(f"[rlstudio] {text}", flush=True)
        return text

    def _mixed_precision(self) -> tuple[torch.dtype, torch.dtype | None]:
        """(master weight dtype, compute dtype): fp32 masters; bf16 compute on GPU."""
        if self.device_type == "cuda":
            return torch.float32, torch.bfloat16
        return torch.float32, None

    def _load_lm(self, path: str, model_cfg, cls_name: str = "causal", dtype=torch.float32, packed_key: str = ""):
        """`packed_key`: the config key that turned use_remove_padding on (attention that also runs packed
        rows, engine/workers/packing.py); empty for plain SDPA."""
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

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

    def _packed_key(self, role: str) -> str:
        """The use_remove_padding key of a role when it is on, else "" (the reference follows the actor's model)."""
        if role == "critic":
            return "critic.model.use_remove_padding" if self.cfg.critic.model.use_remove_padding else ""
        on = self.cfg.actor_rollout_ref.model.use_remove_padding
        return "actor_rollout_ref.model.use_remove_padding" if on else ""

    def _shard(self, model, fsdp_cfg, compute_dtype):
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

    def _build_actor(self) -> Actor:
        actor_rollout_ref = self.cfg.actor_rollout_ref
        master, compute = self._mixed_precision()
        model = self._load_lm(actor_rollout_ref.model.path, actor_rollout_ref.model, dtype=master,
                              packed_key=self._packed_key("actor"))
        if actor_rollout_ref.model.enable_gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = True
        if lora.enabled(actor_rollout_ref.model):
            model = lora.wrap(model, actor_rollout_ref.model)  # before compile and sharding: they see its layers
        if actor_rollout_ref.actor.use_torch_compile and self.device_type == "cuda":
            compile_layers(model)
        self.actor_module = self._shard(model, actor_rollout_ref.actor.fsdp_config, compute)
        if lora.is_lora(self.actor_module):
            # peft's generate calls the wrapped HF model, not the FSDP root; FSDP2 initialises its units lazily
            # on the root's first forward and refuses an inner unit run first (2+ workers). One token through the
            # root, on every rank at build time, does that initialisation.
            with torch.no_grad():
                self.actor_module(input_ids=torch.zeros(1, 1, dtype=torch.long, device=self.device), use_cache=False)
            # and back to the sharded parameters: a unit that keeps its gathered weights after forward (the root;
            # every unit with one worker) would leave its unsharded tensors registered, the optimizer below would
            # hold those, and the adapter would never change (the gradients reach the sharded ones)
            for unit in fsdp_modules(self.actor_module):
                unit.reshard()
        # only what requires gradients: with LoRA the adapter, so AdamW keeps state for it alone
        optimizer = build_optimizer([p for p in self.actor_module.parameters() if p.requires_grad],
                                    actor_rollout_ref.actor.optim, self.device_type)
        scheduler = build_scheduler(optimizer, actor_rollout_ref.actor.optim, self.total_steps)
        return Actor(self.actor_module, optimizer, scheduler, actor_rollout_ref.actor,
                     temperature=actor_rollout_ref.rollout.temperature, rollout_n=actor_rollout_ref.rollout.n,
                     world=self.world, remove_padding=actor_rollout_ref.model.use_remove_padding)

    def _build_reference(self) -> Reference:
        actor_rollout_ref = self.cfg.actor_rollout_ref
        if lora.enabled(actor_rollout_ref.model):  # the base model is the actor with its adapter off: no copy
            return Reference(self.actor_module, actor_rollout_ref.ref, temperature=actor_rollout_ref.rollout.temperature,
                             remove_padding=actor_rollout_ref.model.use_remove_padding, adapter_off=True)
        dtype = torch.bfloat16 if self.device_type == "cuda" else torch.float32
        model = self._load_lm(actor_rollout_ref.model.path, actor_rollout_ref.model, dtype=dtype,
                              packed_key=self._packed_key("ref"))
        model.requires_grad_(False)
        if actor_rollout_ref.ref.use_torch_compile and self.device_type == "cuda":
            compile_layers(model)
        module = self._shard(model, actor_rollout_ref.ref.fsdp_config, None)
        return Reference(module, actor_rollout_ref.ref, temperature=actor_rollout_ref.rollout.temperature,
                         remove_padding=actor_rollout_ref.model.use_remove_padding)

    def _build_critic(self) -> Critic:
        c = self.cfg.critic
        master, compute = self._mixed_precision()
        model = self._load_lm(c.model.path, c.model, cls_name="value", dtype=master,
                              packed_key=self._packed_key("critic"))
        if c.model.enable_gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora.enabled(c.model):
            model = lora.wrap(model, c.model, value_head=True)
        if c.use_torch_compile and self.device_type == "cuda":
            compile_layers(model)  # eager, its small micro-batches were launch-bound: twice the actor's update time
        module = self._shard(model, c.model.fsdp_config, compute)
        optimizer = build_optimizer([p for p in module.parameters() if p.requires_grad], c.optim, self.device_type)
        scheduler = build_scheduler(optimizer, c.optim, self.total_steps)
        return Critic(module, optimizer, scheduler, c, rollout_n=self.cfg.actor_rollout_ref.rollout.n,
                      world=self.world)

    def _build_reward_model(self):
        """The reward model, sharded like the reference (its own tokenizer, micro-batches and max length)."""
        from engine.reward.reward_model import RewardModelScorer

        rm = self.cfg.reward_model
        micro = rm.micro_batch_size_per_gpu or (max(1, rm.micro_batch_size // self.world) if rm.micro_batch_size
                                                else 8)
        compute = torch.bfloat16 if self.device_type == "cuda" else None
        return RewardModelScorer(rm.model.path, device=self.device, micro_batch_size=micro, max_length=rm.max_length,
                                 truncation=rm.truncation,
                                 wrap=lambda model: self._shard(model, rm.model.fsdp_config, compute))

    def _build_rollout(self):
        """The single-turn rollout, inside the agent loop (engine/rollout/agent_loop.py) when multi_turn.enable."""
        from engine.rollout.agent_loop import maybe_agent_loop

        rollout_cfg = self.cfg.actor_rollout_ref.rollout
        if rollout_cfg.name == "vllm":  # ---- vLLM rollout (engine/rollout/vllm_rollout.py) ----
            from engine.rollout.vllm_rollout import VLLMRollout

            inner = VLLMRollout(self.actor_module, self.tokenizer, rollout_cfg, self.cfg.actor_rollout_ref.model,
                                self.device_type, rank=self.rank, world=self.world, seed=self.cfg.trainer.seed,
                                num_threads=torch.get_num_threads())
        else:
            inner = HFRollout(self.actor_module, self.tokenizer, rollout_cfg, self.device_type)
        return maybe_agent_loop(inner, self.tokenizer, rollout_cfg, inner.pad_id,
                                getattr(inner, "eos", None) or eos_ids(self.actor_module, self.tokenizer))

    # ---- the async modes' behaviour policy: a copy the rollout samples with while the actor trains ------------
    def behaviour_init(self) -> None:
        """colocate_async: the copy lives in this process. separate_async: in a rollout process of its own
        (engine/trainer/asynchronous/rollout_process.py), built there the same way; the calls below forward to it."""
        if self.cfg.trainer.v1.trainer_mode == "separate_async":
            from engine.trainer.asynchronous.rollout_process import RolloutProcess
            from engine.trainer.asynchronous.staleness import AsyncSettings

            # no run-ahead: the rollout generates only while this worker waits, so they share one random stream
            self.behaviour = RolloutProcess(self.actor_module, {
                "cfg": self.cfg, "device": self.device_type, "num_threads": torch.get_num_threads()},
                shared_stream=AsyncSettings.from_config(self.cfg).ahead == 0, dtype=self.behaviour_dtype())
            print(f"[rlstudio] rank {self.rank}: rollout process started (pid {self.behaviour.pid})", flush=True)
            return
        from engine.trainer.asynchronous.behaviour import BehaviourPolicy

        self.behaviour = BehaviourPolicy(self.actor_module, *self.behaviour_builders(), dtype=self.behaviour_dtype())
        self.rollout_stream = torch.cuda.Stream() if self.device_type == "cuda" else None

    def behaviour_dtype(self) -> torch.dtype:
        """The dtype the actor computes in, which the behaviour copy holds: bf16 on GPU (the gathered weights' under
        mixed precision); on the CPU the actor's own (fp32, or fsdp_config.model_dtype)."""
        master, compute = self._mixed_precision()
        model_dtype = self.cfg.actor_rollout_ref.actor.fsdp_config.model_dtype
        return compute or (DTYPES[model_dtype] if model_dtype else master)

    def behaviour_builders(self):
        """(build the copy's module, build its rollout): the actor's model loaded as the actor's is, as a plain
        module with the full weights in the actor's compute dtype on this worker's device (no sharding: generation
        runs no collective, so it cannot interleave with the update's on several workers), sampled by the hf
        rollout (its static decoder); the same in this process and in a rollout process."""
        from engine.trainer.asynchronous.behaviour import plain_copy

        arr = self.cfg.actor_rollout_ref
        return (lambda: plain_copy(self._load_lm(arr.model.path, arr.model, dtype=self._mixed_precision()[0]),
                                   self.device, self.behaviour_dtype()),
                lambda module: HFRollout(module, self.tokenizer, arr.rollout, self.device_type))

    def behaviour_publish(self, version: int) -> dict:
        return self.behaviour.publish(version)

    def behaviour_generate(self, batch: Batch, version: int, newest: int | None = None, chunk: int = 0,
                           max_new_tokens: int | None = None):
        # newest/chunk: partial rollout (trainer.v1.partial_rollout); max_new_tokens: one chunk of carry-over's round
        # (trainer.v1.carry_over_groups); engine/trainer/ASYNC.md
        with self._behaviour_stream():
            out, metrics = self.behaviour.generate(self._local(batch), version, newest=newest, chunk=chunk,
                                                   max_new_tokens=max_new_tokens)
            return out.cpu(), metrics  # (synchronous: the batch is complete before it leaves the stream)

    def _behaviour_stream(self):
        """colocate_async on a GPU: the rollout thread's kernels go to a stream of their own. On the thread's
        default stream they would queue behind the update's (the legacy default stream is one queue for every
        thread), and generation and training could not overlap on the device at all."""
        stream = getattr(self, "rollout_stream", None)
        return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    # ---- data methods (called through WorkerGroup.dp_call) ------------------------------------------
    def _local(self, batch: Batch) -> Batch:
        return batch.to(self.device)

    def _profile(self, phase: str, batch: Batch):
        """torch.profiler around this phase when its step is in `trainer.profile_steps`."""
        return maybe_profile(self.cfg.trainer, batch.info.get("global_step"), phase, self.rank, self.device_type)

    def generate_sequences(self, batch: Batch, validate: bool = False):
        start = time.perf_counter()
        if validate:
            out = self.rollout.generate(self._local(batch), validate=True)
        else:
            with self._profile("gen", batch):
                out = self.rollout.generate(self._local(batch), validate=False)
        metrics = {"timing_s/gen_worker": time.perf_counter() - start}
        if not validate and hasattr(self.rollout, "take_freshness"):
            metrics.update(self.rollout.take_freshness())  # the static decoder's check of this step's generation
        return out.cpu(), metrics

    def compute_log_prob(self, batch: Batch):
        with self._profile("old_log_prob", batch):
            return self._compute_log_prob(batch)

    def _compute_log_prob(self, batch: Batch):
        rollout = self.cfg.actor_rollout_ref.rollout
        max_tokens = rollout.log_prob_max_token_len_per_gpu if rollout.log_prob_use_dynamic_bsz else None
        log_probs, entropy = self.actor.compute_log_prob(self._local(batch), rollout.log_prob_micro_batch_size_per_gpu,
                                                         max_tokens)
        metrics = entropy_sums(entropy, batch)  # rollout vs actor mismatch: the driver's (trainer/rollout_mismatch)
        return Batch({"old_log_probs": log_probs.cpu(), "entropys": entropy.cpu()}), metrics

    def compute_ref_log_prob(self, batch: Batch):
        with self._profile("ref", batch):
            log_probs = self.reference.compute_log_prob(self._local(batch))
        return Batch({"ref_log_prob": log_probs.cpu()}), {}

    def compute_rm_score(self, batch: Batch):
        with self._profile("reward_model", batch):
            scores = self.reward_model.score_texts(list(batch.meta["rm_text"]))
        return Batch({"rm_scores": torch.tensor(scores, dtype=torch.float32)}), {}

    def compute_values(self, batch: Batch):
        with self._profile("values", batch):
            return Batch({"values": self.critic.compute_values(self._local(batch)).cpu()}), {}

    def update_actor(self, batch: Batch):
        with self._profile("update_actor", batch):
            metrics, produced = self.actor.update_policy(self._local(batch))
        if "entropys" in produced:  # on-policy update: it computed the old log-probs itself
            metrics.update(entropy_sums(produced["entropys"], batch))
        return produced.cpu(), metrics

    def sync_rollout_weights(self) -> dict:
        """After an update: the rollout engine's copy of the weights made the actor's again (vLLM; a no-op for
        the HF rollout), then checked. A call of its own so that the driver's heartbeat names it."""
        metrics: dict = {}
        self._sync_rollout_weights(metrics)
        return metrics

    # ---- rollout weight sync (vLLM): the engine holds its own copy of the weights --------------------
    def _sync_rollout_weights(self, metrics: dict | None = None) -> None:
        """Stream the actor's current weights into the rollout engine (collective); no-op for HF."""
        if not hasattr(self.rollout, "sync_weights"):
            return
        self.rollout.sync_weights()  # timed by the driver's sync_weights phase
        if getattr(self, "freshness", None) is not None:
            start = time.perf_counter()
            checked = self.freshness()  # collective
            if metrics is not None:
                metrics.update({k: [v] for k, v in checked.items()})
                metrics["timing_s/weight_check"] = [time.perf_counter() - start]
            elif checked["rollout/weights_stale"] and self.rank == 0:
                print(f"[rlstudio] WARNING: the rollout engine's weights are not the actor's after a sync: {checked}",
                      flush=True)

    def rollout_engine_state_dict(self) -> dict:
        """The rollout engine's own weights (tests compare them with the actor's)."""
        return self.rollout.engine_state_dict()
    # ---- end rollout weight sync ------------------------------------------------------------------------

    def update_critic(self, batch: Batch):
        with self._profile("update_critic", batch):
            metrics = self.critic.update_critic(self._local(batch))
        return Batch(), metrics

    # ---- checkpoints -------------------------------------------------------------------------------
    def save_checkpoint(self, directory: str) -> None:
        """Start the checkpoint (collective). Roles with checkpoint.async_save return once their state is in host
        memory and are written in the background; `checkpoint_written` / `finish_checkpoint` follow them."""
        self.finish_checkpoint()
        roles = [("actor", self.actor_module, self.actor, self.cfg.actor_rollout_ref.actor.checkpoint)]
        if self.critic is not None:
            roles.append(("critic", self.critic.module, self.critic, self.cfg.critic.checkpoint))
        for name, module, role, ckpt_cfg in roles:
            path = os.path.join(directory, name)
            group = self._checkpoint_group(name) if ckpt_cfg.async_save else None
            if group is not None and name not in self._ckpt_writers:
                self._ckpt_writers[name] = background_writer(path)
            writer = self._ckpt_writers.get(name) if group is not None else None
            with self._checkpoint_rng():
                future = save_role(path, module, role.optimizer, role.scheduler, self.rank, self.world,
                                   self.tokenizer, background_group=group, writer=writer)
            if future is not None:
                self._writes.append(future)

    def _checkpoint_rng(self):
        """separate_async: the random state a checkpoint records is the rollout process's, where the rollout draws
        (elsewhere one stream serves both), so that a resume's rollout continues its draws."""
        behaviour = getattr(self, "behaviour", None)
        return behaviour.rng_for_checkpoint() if hasattr(behaviour, "rng_for_checkpoint") else contextlib.nullcontext()

    def _checkpoint_group(self, role: str):
        """A gloo group per role for its background writer: two writers (actor, critic) sharing one group would
        interleave their collectives and deadlock. Created on first use, on every rank in the same order
        (save_checkpoint is collective)."""
        if role not in self._ckpt_groups:
            self._ckpt_groups[role] = dist.new_group(backend="gloo")
        return self._ckpt_groups[role]

    def checkpoint_written(self) -> bool:
        """True when no background checkpoint write of this worker is still running (does not wait)."""
        return all(f.done() for f in self._writes)

    def finish_checkpoint(self) -> float:
        """Wait for this worker's background checkpoint writes (re-raising their errors); returns the seconds
        waited. Collective when something was pending on any rank, so every rank calls it together."""
        start = time.perf_counter()
        writes, self._writes = self._writes, []
        for future in writes:
            future.result()
        if writes:
            dist.barrier()
        return time.perf_counter() - start

    def load_checkpoint(self, directory: str) -> None:
        load_role(os.path.join(directory, "actor"), self.actor_module, self.actor.optimizer,
                  self.actor.scheduler, self.rank, self.world)
        if self.critic is not None and os.path.isdir(os.path.join(directory, "critic")):
            load_role(os.path.join(directory, "critic"), self.critic.module, self.critic.optimizer,
                      self.critic.scheduler, self.rank, self.world)
        self._sync_rollout_weights()  # a resumed actor must also be what the rollout engine generates with

    def export_hf(self, directory: str) -> None:
        """Write the actor as an ordinary HF model directory (collective; rank 0 writes). A LoRA actor: the merged
        model (W + scale · B A under the plain names, as the rollout gets it) in `directory`, and the adapter in
        PEFT's layout in `directory`/lora_adapter/."""
        module = self.actor_module
        if not lora.is_lora(module):
            state = full_state_dict(module)
            if self.rank == 0:
                write_hf_model(hf_class(module), module.config, state, directory, self.tokenizer,
                               module.generation_config)
            dist.barrier()
            return
        merged = {}
        for name, tensor in lora.merged_weights(module):  # gathered one at a time; rank 0 keeps a CPU copy
            if self.rank == 0:
                merged[name] = tensor.detach().cpu().clone()
        adapter = lora.trainable_state(module)
        if self.rank == 0:
            base = lora.base_model(module)
            write_hf_model(hf_class(base), base.config, merged, directory, self.tokenizer, base.generation_config)
            lora.save_adapter(module, adapter, os.path.join(directory, lora.ADAPTER_DIR))
        dist.barrier()

    def memory_stats(self) -> dict:
        stats = self._state_sizes()
        if self.device_type == "cuda":
            return {**stats, "perf/max_memory_allocated_gb": torch.cuda.max_memory_allocated() / 2**30,
                    "perf/max_memory_reserved_gb": torch.cuda.max_memory_reserved() / 2**30}
        try:
            import resource

            return {**stats, "perf/cpu_max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}
        except Exception:  # noqa: BLE001
            return stats

    def _state_sizes(self) -> dict:
        """This rank's parameter and AdamW-state bytes per trained role (LoRA: what the adapter saves)."""
        def local_bytes(t) -> int:
            t = t.to_local() if hasattr(t, "to_local") else t
            return t.numel() * t.element_size()

        out = {}
        roles = [("actor", getattr(self, "actor", None)), ("critic", getattr(self, "critic", None))]
        for name, role in roles:
            if role is None:
                continue
            states = [v for st in role.optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
            out[f"perf/{name}_optimizer_state_gb"] = sum(local_bytes(v) for v in states) / 2**30
            trained = [p for group in role.optimizer.param_groups for p in group["params"]]
            out[f"perf/{name}_trained_param_gb"] = sum(local_bytes(p) for p in trained) / 2**30
        return out

    def shutdown(self) -> None:
        if hasattr(getattr(self, "behaviour", None), "close"):  # separate_async: stop the rollout process
            self.behaviour.close()
        if hasattr(getattr(self, "rollout", None), "shutdown"):  # vLLM: stop the engine first
            self.rollout.shutdown()
        if dist.is_initialized():
            dist.destroy_process_group()
