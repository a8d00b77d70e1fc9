"""The trainer's handles on the worker roles: `RolloutRole`, `ActorRole`, `ReferenceRole`, `CriticRole`,
`RewardModelRole`.

Each method names one thing a role does, sends the batch through the worker group (which splits it over the
data-parallel workers and joins the results), adds what the workers computed to the batch, and records the
workers' metrics in the step's `StepLog`. The worker side of each call is the `TrainWorker` method named in
its `_call` (engine/workers/worker.py).
"""
from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable

from engine.protocol import Batch


class StepLog:
    """What one training step records: wall time per phase, the workers' metrics (one value per worker and
    call, reduced when the step ends), metrics computed on the driver and counts summed over the step.
    `on_enter(name)` is called as each phase begins (the trainer's heartbeat)."""

    def __init__(self, on_enter: Callable[[str], None] | None = None) -> None:
        self.timings: dict[str, float] = {}
        self.worker: dict[str, list[float]] = defaultdict(list)
        self.metrics: dict[str, float] = {}
        self.counts: dict[str, int] = defaultdict(int)
        self.on_enter = on_enter

    @contextlib.contextmanager
    def phase(self, name: str):
        if self.on_enter is not None:
            self.on_enter(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start

    def add_worker_metrics(self, metrics: dict[str, list[float]]) -> None:
        for k, v in metrics.items():
            self.worker[k].extend(v)


class _Role:
    def __init__(self, group) -> None:
        self.group = group

    def _call(self, method: str, batch: Batch, log: StepLog | None, **kwargs) -> Batch:
        out, metrics = self.group.dp_call(method, batch, **kwargs)
        if log is not None:
            log.add_worker_metrics(metrics)
        return out


class RolloutRole(_Role):
    def generate(self, prompts: Batch, log: StepLog | None = None, validate: bool = False) -> Batch:
        """Sample responses (rollout.val_kwargs when `validate`); returns the prompts with their responses."""
        return self._call("generate_sequences", prompts, log, validate=validate)

    def sync_weights(self, log: StepLog | None = None) -> None:
        """The rollout engine takes the actor's current weights (an engine with its own copy: vLLM)."""
        for metrics in self.group.all_call("sync_rollout_weights"):
            if log is not None:
                log.add_worker_metrics(metrics)


class ActorRole(_Role):
    def compute_log_prob(self, batch: Batch, log: StepLog) -> Batch:
        """Adds `old_log_probs` and `entropys` under the current weights."""
        return batch.union(self._call("compute_log_prob", batch, log))

    def update(self, batch: Batch, log: StepLog) -> Batch:
        """The PPO update; an on-policy update also adds the old log-probs it took from its own forward."""
        return batch.union(self._call("update_actor", batch, log))


class ReferenceRole(_Role):
    def compute_log_prob(self, batch: Batch, log: StepLog) -> Batch:
        """Adds `ref_log_prob` under the frozen reference weights."""
        return batch.union(self._call("compute_ref_log_prob", batch, log))


class CriticRole(_Role):
    def compute_values(self, batch: Batch, log: StepLog) -> Batch:
        """Adds `values`."""
        return batch.union(self._call("compute_values", batch, log))

    def update(self, batch: Batch, log: StepLog) -> Batch:
        """Regress the values on `returns`; the batch comes back unchanged."""
        self._call("update_critic", batch, log)
        return batch


class RewardModelRole(_Role):
    """The reward model (reward_model.enable), colocated on the workers like the reference."""

    def __call__(self, prompt_texts: list[str], response_texts: list[str]) -> list[float]:
        """One score per prompt + response text (engine.reward.reward_model.ModelReward adds it to the reward)."""
        texts = Batch(meta={"rm_text": _object_array([p + r for p, r in zip(prompt_texts, response_texts)])})
        return self._call("compute_rm_score", texts, None)["rm_scores"].tolist()


def _object_array(values: list[str]):
    import numpy as np

    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
