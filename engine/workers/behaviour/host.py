"""The worker's side of the async modes' behaviour policy: the object a TrainWorker owns once the driver asks for it
(`behaviour_init`). colocate_async keeps the copy in the worker's own process (policy.py) and runs its generations
on a CUDA stream of their own; separate_async keeps it in a rollout process beside the worker (process.py, whose
child builds it the same way: child.py). The design: engine/trainer/ASYNC.md.
"""
from __future__ import annotations

import contextlib

import torch

from engine.protocol import Batch
from engine.workers.behaviour.policy import build_policy
from engine.workers.behaviour.process import RolloutProcess
from engine.workers.build import RoleBuilder, behaviour_dtype


class BehaviourHost:
    """`shared_stream`: the rollout generates only while the worker waits (the driver's run-ahead is 0), so in
    separate_async the worker and its rollout process hand one random stream back and forth."""

    def __init__(self, builder: RoleBuilder, tokenizer, actor_module, rank: int, shared_stream: bool):
        cfg, device_type = builder.cfg, builder.device_type
        self.stream = None
        if cfg.trainer.v1.trainer_mode == "separate_async":
            self.policy = RolloutProcess(actor_module, {
                "cfg": cfg, "device": device_type, "num_threads": torch.get_num_threads()},
                shared_stream=shared_stream, dtype=behaviour_dtype(cfg, device_type))
            print(f"[rlstudio] rank {rank}: rollout process started (pid {self.policy.pid})", flush=True)
            return
        self.policy = build_policy(builder, tokenizer, actor_module)
        # colocate_async on a GPU: the rollout thread's kernels go to a stream of their own. On the thread's default
        # stream they would queue behind the update's (the legacy default stream is one queue for every thread),
        # and generation and training could not overlap on the device at all.
        self.stream = torch.cuda.Stream() if device_type == "cuda" else None

    def publish(self, version: int) -> dict:
        return self.policy.publish(version)

    def generate(self, batch: Batch, version: int, newest: int | None = None, chunk: int = 0,
                 max_new_tokens: int | None = None) -> tuple[Batch, dict]:
        # newest/chunk: partial rollout (trainer.v1.partial_rollout); max_new_tokens: one chunk of carry-over's round
        # (trainer.v1.carry_over_groups); engine/trainer/ASYNC.md
        with torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
            out, metrics = self.policy.generate(batch, version, newest=newest, chunk=chunk,
                                                max_new_tokens=max_new_tokens)
            return out.cpu(), metrics  # (synchronous: the batch is complete before it leaves the stream)

    def rng_for_checkpoint(self):
        """separate_async: the random state a checkpoint records is the rollout process's, where the rollout draws
        (elsewhere one stream serves both), so that a resume's rollout continues its draws."""
        if isinstance(self.policy, RolloutProcess):
            return self.policy.rng_for_checkpoint()
        return contextlib.nullcontext()

    def close(self) -> None:
        if isinstance(self.policy, RolloutProcess):  # separate_async: stop the rollout process
            self.policy.close()
