"""The behaviour policy of the async modes, on the worker: a second copy of the actor, sharded as the actor is, that
the rollout generates with while the actor trains (the colocated rollout samples with the actor's own weights,
which the update is changing). Sharded like the actor, it holds only this worker's shards, and a snapshot is
those shards (no collective); given the same weights it computes the actor's log-probs to the bit on the CPU.

The driver publishes the actor's weights after each step as a numbered version (a CPU snapshot) and asks for each
batch to be generated with one exact version, so which weights produced which batch does not depend on thread
timing. Snapshots older than the version last asked for are dropped: at most the rollout's lead + 1 are held.
"""
from __future__ import annotations

import threading
import time

import torch

from engine.protocol import Batch


class BehaviourPolicy:
    def __init__(self, actor_module, build_module, build_rollout):
        """`build_module()`: the model class loaded as the actor's is (plain, unsharded, eval, no grad);
        `build_rollout(module)`: the rollout that samples with it (the hf rollout's static decoder)."""
        self.actor_module = actor_module
        # Left as loaded (requires_grad as the actor's): generation runs under no_grad either way, but on the CPU
        # a forward over weights without requires_grad takes another kernel path and differs in the last bits
        self.module = build_module()
        self.module.eval()
        self.rollout = build_rollout(self.module)
        self.version: int | None = None  # the version the copy's weights are
        self.snapshots: dict[int, dict[str, torch.Tensor]] = {}
        self.lock = threading.Lock()  # publish (the driver's main thread) vs generate (its rollout thread)

    def publish(self, version: int) -> dict:
        """Snapshot the actor's current weights as `version`: this worker's shards (the copy is sharded as the
        actor is, so shard i of the actor is shard i of the copy; no collective)."""
        start = time.perf_counter()
        state = {k: _local(v).detach().to("cpu", copy=True) for k, v in self.actor_module.named_parameters()}
        with self.lock:
            self.snapshots[int(version)] = state
        return {"timing_s/update_weights": time.perf_counter() - start}

    def generate(self, batch: Batch, version: int) -> tuple[Batch, dict]:
        """Answers sampled with the weights of `version` exactly (published earlier)."""
        version = int(version)
        with self.lock:
            if version not in self.snapshots and version != self.version:
                raise RuntimeError(f"behaviour policy: version {version} was never published (have "
                                   f"{sorted(self.snapshots)}, loaded {self.version})")
            state = self.snapshots.get(version) if version != self.version else None
            for old in [v for v in self.snapshots if v < version]:
                del self.snapshots[old]
        start = time.perf_counter()
        if state is not None:
            with torch.no_grad():
                for name, param in self.module.named_parameters():
                    _local(param).copy_(state[name])
            self.version = version
        metrics = {"timing_s/behaviour_load": time.perf_counter() - start}
        start = time.perf_counter()
        out = self.rollout.generate(batch, validate=False)
        metrics["timing_s/gen_worker"] = time.perf_counter() - start
        if hasattr(self.rollout, "take_freshness"):
            # the static decoder's check that it decoded the weights just loaded (rollout/weights_stale, and
            # rollout/actor_weight_change: how far they moved since the last load), reported after each load only:
            # a batch on a version already used (the rollout ahead, early on) moved nothing and says nothing about
            # the actor (the server's actor-not-moving check reads the change)
            fresh = self.rollout.take_freshness()
            if state is not None:
                metrics.update(fresh)
        return out, metrics


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This worker's shard of an FSDP2 parameter (the tensor itself when not sharded), as a view to read or fill."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor
