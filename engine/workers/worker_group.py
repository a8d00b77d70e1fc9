"""A group of Ray actors that the driver calls as if it were one object.

`dp_call` splits a Batch evenly over the data-parallel workers and concatenates what they return;
`all_call` sends the same arguments to every worker. This is the only place that splits or joins.
"""
from __future__ import annotations

import os
from typing import Any

import ray
import torch

from engine.protocol import Batch

# NVLink multicast stays off everywhere, including in the environment Ray hands to workers.
WORKER_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
    "TRANSFORMERS_VERBOSITY": "error",  # no per-worker load reports / progress bars in the run log
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}


class ResourceError(RuntimeError):
    pass


def plan_resources(world: int, device: str, nnodes: int, n_per_node: int) -> dict:
    """Check the cluster can hold `world` workers and say how many CPUs/GPUs each gets."""
    resources = ray.cluster_resources()
    if device == "cuda":
        have = int(resources.get("GPU", 0))
        if have < world:
            raise ResourceError(
                f"trainer.nnodes × trainer.n_gpus_per_node = {nnodes} × {n_per_node} = {world} GPUs requested, "
                f"but the Ray cluster has {have}. Lower trainer.n_gpus_per_node or add nodes.")
        cpus = max(1, int(resources.get("CPU", world)) // world)
        return {"num_gpus": 1, "num_cpus": min(cpus, 4)}
    have = int(resources.get("CPU", 0))
    if have < world:
        raise ResourceError(
            f"trainer.nnodes × trainer.n_gpus_per_node = {world} CPU worker processes requested, but the Ray "
            f"cluster has {have} CPUs. On CPU each worker needs one core: lower trainer.n_gpus_per_node.")
    return {"num_gpus": 0, "num_cpus": max(1, have // world)}


class WorkerGroup:
    def __init__(self, worker_cls, world: int, resources: dict, init_args: tuple = (), name: str = "worker"):
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = {"CPU": resources["num_cpus"]}
        if resources["num_gpus"]:
            bundle["GPU"] = resources["num_gpus"]
        self.pg = placement_group([bundle] * world, strategy="PACK")
        ready, _ = ray.wait([self.pg.ready()], timeout=float(os.environ.get("RLSTUDIO_PG_TIMEOUT", 300)))
        if not ready:
            raise ResourceError(f"Ray could not place {world} workers with {bundle} each within the timeout.")
        remote_cls = ray.remote(worker_cls)
        self.workers = []
        for rank in range(world):
            strategy = PlacementGroupSchedulingStrategy(placement_group=self.pg, placement_group_bundle_index=rank)
            actor = remote_cls.options(
                num_cpus=resources["num_cpus"], num_gpus=resources["num_gpus"], scheduling_strategy=strategy,
                runtime_env={"env_vars": WORKER_ENV}, name=None,
            ).remote(rank, world, *init_args)
            self.workers.append(actor)
        self.world = world

    # ---- calls ---------------------------------------------------------------------------------------
    def all_call(self, method: str, *args, **kwargs) -> list[Any]:
        return ray.get([getattr(w, method).remote(*args, **kwargs) for w in self.workers])

    def rank0_call(self, method: str, *args, **kwargs) -> Any:
        return ray.get(getattr(self.workers[0], method).remote(*args, **kwargs))

    def dp_call(self, method: str, batch: Batch, **kwargs) -> tuple[Batch, dict[str, list[float]]]:
        """Split `batch` over workers; each returns (Batch, metrics). Returns the joined batch and metrics.

        A batch that does not divide by the worker count (validation sets) is padded with copies of its first
        rows so every worker gets the same number, and the padding's rows are dropped from the result.
        (Training batches always divide: the config check requires it, so no update sees a padded row.)"""
        n = len(batch)
        pad = (-n) % self.world
        if pad:
            batch = batch.index(torch.arange(n + pad) % n)
        chunks = batch.chunk(self.world)
        results = ray.get([getattr(w, method).remote(c, **kwargs) for w, c in zip(self.workers, chunks)])
        out = Batch.concat([r[0] for r in results])
        if pad and len(out):
            out = out.slice(0, n)
        metrics: dict[str, list[float]] = {}
        for _, m in results:
            for k, v in (m or {}).items():
                metrics.setdefault(k, []).extend(v if isinstance(v, list) else [v])
        return out, metrics

    def shutdown(self) -> None:
        for w in self.workers:
            try:
                ray.kill(w)
            except Exception:  # noqa: BLE001 - already gone
                pass
        try:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.pg)
        except Exception:  # noqa: BLE001
            pass
