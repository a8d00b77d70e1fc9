"""The colocated worker: one process per GPU (or per CPU worker) hosting every role's shard.

The roles are their own modules: the actor (actor.py), the reference (reference.py) and the critic (critic.py)
in this folder, the rollout in engine/rollout/, the reward model in engine/reward/reward_model.py. They are built
(loaded, sharded, given their optimizers) by build.py and called here: Actor + Rollout share one module (the
rollout generates with the actor's weights), the Reference and the Critic live beside them. The worker also owns
its checkpoints (checkpoints.py) and, in the async modes, the behaviour policy's host (behaviour/host.py). The
driver calls these methods through `WorkerGroup` (engine/distributed/worker_group.py); each data method takes this
worker's chunk of the batch and returns (Batch, metrics).
"""
from __future__ import annotations

import contextlib
import os
import socket
import time
import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from engine.adapters import lora
from engine.config.plan import Plan
from engine.protocol import Batch
from engine.rollout import freshness, registry
from engine.rollout.build import build_rollout
from engine.workers import auto_micro
from engine.workers.behaviour.host import BehaviourHost
from engine.workers.build import RoleBuilder, default_packing, load_tokenizer
from engine.workers.checkpoints import WorkerCheckpoints
from engine.workers.memory import memory_stats
from engine.workers.profiling import maybe_profile


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def entropy_sums(entropy: torch.Tensor, batch: Batch) -> dict[str, list[float]]:
    """Token-weighted entropy parts; the driver sums them over workers into actor/entropy."""
    mask = batch["response_mask"].to(entropy.device).float()
    return {"_entropy_sum": [float((entropy * mask).sum())], "_entropy_count": [float(mask.sum())]}


class TrainWorker:
    def __init__(self, rank: int, world: int, cfg, total_steps: int, device: str, num_threads: int = 1):
        # `cfg` is the job's config, read-only; this worker's parts read `self.cfg`: a copy with what the worker
        # decides from its device and memory, recorded as its plan (engine/config/plan.py; init reports it)
        self.plan = Plan.start(cfg, "worker")
        self.rank, self.world, self.cfg = rank, world, self.plan.config
        self.total_steps = total_steps
        self.device_type = device
        if device == "cpu":
            torch.set_num_threads(max(1, num_threads))
        self.auto_packing = default_packing(self.cfg, device)  # use_remove_padding left unset: packed on GPU
        self.plan.record("use_remove_padding unset: " + ("packed on the GPU" if device == "cuda" else "padded on the CPU"))
        # Our forward passes only slice model outputs out of place, which this FSDP2 warning is about.
        warnings.filterwarnings("ignore", message=".*returned a view tensor.*")
        self.behaviour: BehaviourHost | None = None  # the async modes' copy of the actor (behaviour_init)

    # ---- set-up ------------------------------------------------------------------------------------
    def address(self) -> tuple[str, int]:
        try:
            import ray  # only under Ray (an in-process worker never loads it)

            ip = ray.util.get_node_ip_address()
        except Exception:  # noqa: BLE001 - outside Ray
            ip = "127.0.0.1"
        return ip, free_port()

    def init(self, master_addr: str, master_port: int, uses_ref: bool) -> dict:
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
        self.builder = RoleBuilder(cfg, self.device, self.mesh, self.world, self.total_steps, self.auto_packing)
        torch.manual_seed(cfg.trainer.seed)  # identical initial weights (e.g. a new value head) on every rank
        self.actor = self.builder.actor()
        self.actor_module = self.actor.module
        self.reference = self.builder.reference(self.actor_module) if uses_ref else None
        self.critic = self.builder.critic() if cfg.critic.enable else None
        self.reward_model = self.builder.reward_model() if cfg.reward_model.enable else None
        self.rollout = build_rollout(cfg, self.actor_module, self.tokenizer, self.device_type, self.rank, self.world)
        # after each sync: did the update reach the rollout's own weights (vLLM; None for transformers' generate)
        self.freshness = freshness.for_rollout(self.actor_module, self.rollout)
        self.checkpoints = WorkerCheckpoints(self._trained_roles, self.tokenizer, self.rank, self.world,
                                             rng=self._checkpoint_rng, saves=cfg.trainer.save_freq > 0)
        torch.manual_seed(cfg.trainer.seed * 1000 + self.rank)  # different samples on different ranks
        micro = None
        if cfg.trainer.auto_micro_batch and self.device_type == "cuda":
            rollout = cfg.actor_rollout_ref.rollout
            micro = auto_micro.choose(cfg, self.actor_module, self.critic.module if self.critic else None,
                                      own_pool=registry.backend(rollout).own_memory and bool(rollout.free_cache_engine))
            if self.rank == 0:
                print(f"[rlstudio] {micro}", flush=True)
            self.plan.record(micro)
        self.plan.done()  # read-only from here on
        actor = lora.parameter_counts(self.actor_module)
        # the critic's counts beside the actor's (a LoRA critic trains its adapter and value head only)
        critic = lora.parameter_counts(self.critic.module) if self.critic is not None else None
        return {"rank": self.rank, "device": str(self.device),
                "device_name": torch.cuda.get_device_name(0) if self.device_type == "cuda" else "cpu",
                "n_params": actor["total"], "n_trainable_params": actor["trainable"],
                **({"critic_n_params": critic["total"], "critic_n_trainable_params": critic["trainable"]}
                   if critic else {}), "micro_batching": micro, "plan": self.plan.entries}

    def _trained_roles(self) -> list:
        """(name, role, checkpoint config) of each trained role: what a checkpoint holds."""
        roles = [("actor", self.actor, self.cfg.actor_rollout_ref.actor.checkpoint)]
        if self.critic is not None:
            roles.append(("critic", self.critic, self.cfg.critic.checkpoint))
        return roles

    # ---- the async modes' behaviour policy: a copy the rollout samples with while the actor trains ------------
    def behaviour_init(self, shared_stream: bool = False) -> None:
        """colocate_async: the copy lives in this process. separate_async: in a rollout process of its own
        (behaviour/process.py), built there the same way. `shared_stream`: the driver runs no batch ahead, so the
        rollout generates only while this worker waits and they share one random stream."""
        self.behaviour = BehaviourHost(self.builder, self.tokenizer, self.actor_module, self.rank, shared_stream)

    def behaviour_publish(self, version: int) -> dict:
        return self.behaviour.publish(version)

    def behaviour_generate(self, batch: Batch, version: int, newest: int | None = None, chunk: int = 0,
                           max_new_tokens: int | None = None):
        return self.behaviour.generate(self._local(batch), version, newest=newest, chunk=chunk,
                                       max_new_tokens=max_new_tokens)

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
        self.checkpoints.prepare()  # the first update made the optimizer's state: stage buffers for the saves ahead
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
        self.checkpoints.prepare()
        return Batch(), metrics

    # ---- checkpoints (collective: every worker at once) -------------------------------------------------
    def save_checkpoint(self, directory: str) -> None:
        """Start the checkpoint. Roles with checkpoint.async_save return once their state is in host memory and are
        written in the background; `checkpoint_written` / `finish_checkpoint` follow them."""
        self.checkpoints.save(directory)

    def _checkpoint_rng(self):
        return self.behaviour.rng_for_checkpoint() if self.behaviour is not None else contextlib.nullcontext()

    def checkpoint_written(self) -> bool:
        return self.checkpoints.written()

    def finish_checkpoint(self) -> float:
        return self.checkpoints.finish()

    def load_checkpoint(self, directory: str) -> None:
        self.checkpoints.load(directory)
        self._sync_rollout_weights()  # a resumed actor must also be what the rollout engine generates with

    def export_hf(self, directory: str) -> None:
        self.checkpoints.export_hf(self.actor_module, directory)

    def memory_stats(self) -> dict:
        return memory_stats(self.device_type, [("actor", self.actor), ("critic", self.critic)])

    def shutdown(self) -> None:
        if getattr(self, "behaviour", None) is not None:  # separate_async: stop the rollout process
            self.behaviour.close()
        if hasattr(getattr(self, "rollout", None), "shutdown"):  # vLLM: stop the engine first
            self.rollout.shutdown()
        if dist.is_initialized():
            dist.destroy_process_group()
