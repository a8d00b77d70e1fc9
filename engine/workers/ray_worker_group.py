"""A worker group of Ray actors: one TrainWorker per GPU (or per CPU worker), on one machine or a cluster."""
from __future__ import annotations

import os
from typing import Any

import ray

from engine.workers.worker_group import WORKER_ENV, WorkerGroup


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


class RayWorkerGroup(WorkerGroup):
    def __init__(self, worker_cls, world: int, resources: dict, init_args: tuple = ()):
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

    def _call_each(self, method: str, calls: list[tuple[tuple, dict]]) -> list[Any]:
        return ray.get([getattr(w, method).remote(*args, **kwargs) for w, (args, kwargs) in zip(self.workers, calls)])

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
