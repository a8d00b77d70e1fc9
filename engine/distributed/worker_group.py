"""Worker groups: the driver calls the TrainWorkers of a run as if they were one object.

`dp_call` splits a Batch evenly over the data-parallel workers and concatenates what they return;
`all_call` sends the same arguments to every worker. This is the only place that splits or joins.
Two groups share that logic: `RayWorkerGroup` (engine/distributed/ray_worker_group.py: one Ray actor per
worker, any count, one machine or a cluster) and `InProcessWorkerGroup` (one worker in the driver's own
process: no Ray, nothing to start).
"""
from __future__ import annotations

import copy
import os
from typing import Any

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


class WorkerGroup:
    """The calls; a subclass says how one call per worker runs (`_call_each`) and how the workers stop."""

    world: int

    def _call_each(self, method: str, calls: list[tuple[tuple, dict]]) -> list[Any]:
        """Call `method` on worker i with calls[i] = (args, kwargs), all at once (the first len(calls) workers);
        the results in rank order."""
        raise NotImplementedError

    def all_call(self, method: str, *args, **kwargs) -> list[Any]:
        return self._call_each(method, [(args, kwargs)] * self.world)

    def rank0_call(self, method: str, *args, **kwargs) -> Any:
        return self._call_each(method, [(args, kwargs)])[0]

    def dp_call(self, method: str, batch: Batch, **kwargs) -> tuple[Batch, dict[str, list[float]]]:
        """Split `batch` over workers; each returns (Batch, metrics). Returns the joined batch and metrics.

        A batch that does not divide by the worker count (validation sets) is padded with copies of its first
        rows so every worker gets the same number, and the padding's rows are dropped from the result.
        (Training batches always divide: the config check requires it, so no update sees a padded row.)"""
        n = len(batch)
        pad = (-n) % self.world
        if pad:
            batch = batch.index(torch.arange(n + pad) % n)
        results = self._call_each(method, [((c,), kwargs) for c in batch.chunk(self.world)])
        out = Batch.concat([r[0] for r in results])
        if pad and len(out):
            out = out.slice(0, n)
        metrics: dict[str, list[float]] = {}
        for _, m in results:
            for k, v in (m or {}).items():
                metrics.setdefault(k, []).extend(v if isinstance(v, list) else [v])
        return out, metrics

    def shutdown(self) -> None:
        """Stop the workers (after their own `shutdown` method has run)."""


class InProcessWorkerGroup(WorkerGroup):
    """One worker living in this process: the same calls as a Ray group of one, without Ray. The worker's
    distributed group is a world of one over a free local port (FSDP2 still wraps the model)."""

    def __init__(self, worker_cls, init_args: tuple = ()):
        for k, v in WORKER_ENV.items():
            os.environ.setdefault(k, v)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # as in a Ray worker's environment (transformers read it at import)
        self.world = 1
        # a copy, as Ray would pickle it: the worker fills in config defaults of its own (packing, micro-batches)
        self.workers = [worker_cls(0, 1, *copy.deepcopy(init_args))]

    def _call_each(self, method: str, calls: list[tuple[tuple, dict]]) -> list[Any]:
        args, kwargs = calls[0]
        return [getattr(self.workers[0], method)(*args, **kwargs)]
