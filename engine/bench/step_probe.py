"""What each bench step's actor update ran with, to explain an update time that swings between steps (issue 40 §4:
W2's two updates took 2.23 s and 5.41 s): the micro-batch plan (how many micro-batches, their real tokens), the
CUDA caching allocator's work (cudaMalloc calls, and its retries: a retry frees every cached block and waits for
the device), and the graphs torch.compile made. Read in this process, so only with the in-process worker (the
bench's default); with `ray_init.mode=ray` it reports nothing.
"""
from __future__ import annotations

import contextlib

import torch


class StepProbe:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.plans: list[list[tuple]] = []  # each update call's micro-batches (rows, width, real tokens)
        self._last = self._counters()
        self._restore = None

    def start(self) -> StepProbe:
        if self.enabled:  # the update's own call, wrapped where update.py looks it up (bench only)
            from engine.workers import update

            original = update.micro_batches

            def recording(mini, *args, **kwargs):
                mbs, order = original(mini, *args, **kwargs)
                self.plans.append([(*mb["attention_mask"].shape, int(mb["attention_mask"].sum())) for mb in mbs])
                return mbs, order

            update.micro_batches = recording
            self._restore = lambda: setattr(update, "micro_batches", original)
        return self

    def stop(self) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None

    def _counters(self) -> dict[str, int]:
        out = {}
        if torch.cuda.is_available():
            stats = torch.cuda.memory_stats()
            out |= {"alloc_retries": stats.get("num_alloc_retries", 0),
                    "device_allocs": stats.get("num_device_alloc", 0)}
        with contextlib.suppress(Exception):  # dynamo's counters are internal: their absence is no error
            from torch._dynamo.utils import counters

            out["compiled_graphs"] = int(counters["stats"]["unique_graphs"])
        return out

    def sample(self) -> dict:
        """Since the last sample (one step): the actor update's micro-batch plan and the counters' increase."""
        if not self.enabled:
            return {}
        now = self._counters()
        out = {f"probe/{k}": v - self._last.get(k, 0) for k, v in now.items()}
        self._last = now
        # every update of the step (GRPO: the actor's alone; with a critic, its update too)
        mbs = [mb for plan in self.plans for mb in plan]
        if mbs:
            out |= {"probe/micro_batches": len(mbs), "probe/micro_shapes": len({mb[:2] for mb in mbs}),
                    "probe/micro_tokens_max": max(mb[2] for mb in mbs),
                    "probe/micro_tokens_min": min(mb[2] for mb in mbs),
                    "probe/micro_padded_tokens": sum(mb[0] * mb[1] for mb in mbs)}
        self.plans = []
        return out
