"""A worker group of Ray actors: one TrainWorker per GPU (or per CPU worker), on one machine or a cluster.

Placement honours trainer.nnodes and trainer.n_gpus_per_node exactly: one placement-group bundle per node,
holding that node's n_gpus_per_node workers, and the bundles STRICT_SPREAD over distinct nodes when
nnodes > 1. Rank r runs in bundle r // n_gpus_per_node, so ranks 0..n-1 share the first node, and so on.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import ray

from engine.distributed.worker_group import WORKER_ENV, WorkerGroup
from engine.errors import UserError


class ResourceError(UserError, RuntimeError):
    """The machine or cluster lacks what the run asks for (GPUs, CPUs, nodes); the message says which key."""


@dataclass
class Placement:
    nnodes: int
    per_node: int  # workers per node (trainer.n_gpus_per_node)
    num_cpus: int  # per worker
    num_gpus: int  # per worker: 1 on GPU, 0 on CPU

    @property
    def world(self) -> int:
        return self.nnodes * self.per_node

    @property
    def bundles(self) -> list[dict]:
        """One bundle per node, big enough for all of that node's workers."""
        bundle = {"CPU": self.num_cpus * self.per_node}
        if self.num_gpus:
            bundle["GPU"] = self.num_gpus * self.per_node
        return [bundle] * self.nnodes

    @property
    def strategy(self) -> str:
        return "STRICT_SPREAD" if self.nnodes > 1 else "PACK"

    def bundle_of(self, rank: int) -> int:
        return rank // self.per_node


def _describe(node: dict) -> str:
    res = node.get("Resources", {})
    return f"{node.get('NodeManagerAddress', '?')} ({int(res.get('CPU', 0))} CPU, {int(res.get('GPU', 0))} GPU)"


def plan_placement(nodes: list[dict], device: str, nnodes: int, n_per_node: int) -> Placement:
    """Check that `nodes` (as `ray.nodes()` lists them) hold nnodes nodes of n_per_node workers each, and
    say how many CPUs each worker gets. Raises ResourceError naming the keys and what the cluster has."""
    alive = [n for n in nodes if n.get("Alive", True)]
    unit = "GPU" if device == "cuda" else "CPU"
    # on GPU a worker needs one GPU and at least one CPU; on CPU one core (more if the node has them)
    fits = sorted((n for n in alive if n.get("Resources", {}).get(unit, 0) >= n_per_node
                   and n.get("Resources", {}).get("CPU", 0) >= n_per_node),
                  key=lambda n: n["Resources"].get("CPU", 0), reverse=True)
    if len(fits) < nnodes:
        what = f"{n_per_node} GPU{'s' if n_per_node > 1 else ''}" if unit == "GPU" else \
            f"{n_per_node} CPU{'s' if n_per_node > 1 else ''} (on CPU one core per worker process)"
        have = "; ".join(_describe(n) for n in alive) or "none"
        plural = "s" if len(alive) != 1 else ""
        hint = ("Lower trainer.nnodes or trainer.n_gpus_per_node, or add nodes (`ray start --address=HEAD:PORT` on "
                "each) and pass the cluster with ray_init.address or RAY_ADDRESS.")
        raise ResourceError(
            f"trainer.nnodes={nnodes} × trainer.n_gpus_per_node={n_per_node} needs {nnodes} Ray node{'s' if nnodes > 1 else ''} "
            f"with {what} each, but the Ray cluster has {len(alive)} node{plural}: {have}. {hint}")
    cpus = min(int(n["Resources"].get("CPU", 0)) for n in fits[:nnodes]) // n_per_node
    if device == "cuda":
        return Placement(nnodes, n_per_node, num_cpus=max(1, min(cpus, 4)), num_gpus=1)
    return Placement(nnodes, n_per_node, num_cpus=max(1, cpus), num_gpus=0)


def plan_resources(device: str, nnodes: int, n_per_node: int) -> Placement:
    return plan_placement(ray.nodes(), device, nnodes, n_per_node)


class RayWorkerGroup(WorkerGroup):
    def __init__(self, worker_cls, placement: Placement, init_args: tuple = (), env_vars: dict | None = None,
                 max_concurrency: int = 1):
        """`env_vars`: each worker's environment variables (default WORKER_ENV), over the job's runtime_env.
        `max_concurrency`: calls a worker actor runs at once, each in a thread of its own (Ray's threaded actor;
        1: one at a time, in order)."""
        from ray.util.placement_group import placement_group, placement_group_table
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.pg = placement_group(placement.bundles, strategy=placement.strategy)
        ready, _ = ray.wait([self.pg.ready()], timeout=float(os.environ.get("RLSTUDIO_PG_TIMEOUT", 300)))
        if not ready:
            raise ResourceError(
                f"Ray could not place trainer.nnodes={placement.nnodes} × trainer.n_gpus_per_node="
                f"{placement.per_node} workers ({placement.bundles[0]} per node, {placement.strategy}) within the "
                "timeout: the cluster has the room but other jobs hold it. Wait for them or ask for fewer workers.")
        bundle_nodes = placement_group_table(self.pg)["bundles_to_node_id"]
        remote_cls = ray.remote(worker_cls)
        self.workers, self.node_ids = [], []
        for rank in range(placement.world):
            bundle = placement.bundle_of(rank)
            strategy = PlacementGroupSchedulingStrategy(placement_group=self.pg, placement_group_bundle_index=bundle)
            actor = remote_cls.options(
                num_cpus=placement.num_cpus, num_gpus=placement.num_gpus, scheduling_strategy=strategy,
                runtime_env={"env_vars": WORKER_ENV if env_vars is None else env_vars}, name=None,
                max_concurrency=max_concurrency,
            ).remote(rank, placement.world, *init_args)
            self.workers.append(actor)
            self.node_ids.append(bundle_nodes[bundle])
        self.world = placement.world

    def describe_placement(self) -> str:
        """e.g. `node 1a2b3c4d: ranks 0,1; node 5e6f7a8b: ranks 2,3` (Ray node ids, shortened)."""
        ranks: dict[str, list[int]] = {}
        for rank, node in enumerate(self.node_ids):
            ranks.setdefault(node, []).append(rank)
        return "; ".join(f"node {node[:8]}: ranks {','.join(map(str, r))}" for node, r in ranks.items())

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
