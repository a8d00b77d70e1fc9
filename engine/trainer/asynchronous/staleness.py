"""Staleness in model versions, as verl's v1 sampler counts it (pure: no torch, no threads).

A policy version is the number of actor updates applied to the weights. Step t (1-based) trains on weights of
version t - 1, so a group generated entirely by version v and trained at step t has verl's *age*
t - v (verl: global_steps - prompt_global_steps + 1): 1 when it is on-policy, as in the sync trainer.
`trainer.v1.sampler.max_off_policy_threshold` bounds the age; `max_off_policy_strategy` says what happens past it
(drop: evict the group, one new prompt refills it; wait: never start what could pass it).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AsyncSettings:
    mode: str  # colocate_async | separate_async
    threshold: int  # max_off_policy_threshold (>= 1)
    strategy: str  # drop | wait
    warmup: int  # num_warmup_batches of the mode: batches generated ahead of the update
    sync_every: int  # mini-batches between weight syncs (separate_async's parameter_sync_step)

    @classmethod
    def from_config(cls, cfg) -> "AsyncSettings":
        v1 = cfg.trainer.v1
        mode = v1.trainer_mode
        mode_cfg = v1.separate_async if mode == "separate_async" else v1.colocate_async
        actor = cfg.actor_rollout_ref.actor
        # colocate_async syncs once a step (the whole batch's mini-batches); separate_async's invariant makes its
        # parameter_sync_step the same count (engine/config/trainer_mode.py checks it)
        minis = cfg.data.train_batch_size // actor.ppo_mini_batch_size
        sync_every = v1.separate_async.parameter_sync_step if mode == "separate_async" else minis
        return cls(mode, v1.sampler.max_off_policy_threshold, v1.sampler.max_off_policy_strategy,
                   mode_cfg.num_warmup_batches, sync_every)

    @property
    def ahead(self) -> int:
        """Batches the rollout may generate beyond the one being trained. A batch started k batches ahead is
        trained at age k + 1, so running further than threshold - 1 ahead would make every batch stale."""
        return max(0, min(self.warmup, self.threshold - 1))


def age(trained_step: int, oldest_version: int) -> int:
    """verl's prompt age: model versions from the first generated token to the update (1 = on-policy)."""
    return trained_step - oldest_version


def may_start(target_step: int, version: int, ahead: int) -> bool:
    """May the rollout, holding weights of `version`, start the batch that step `target_step` will train?
    Only when its age at training will be at most ahead + 1 (ahead = 0: the sync trainer's order)."""
    return age(target_step, version) <= ahead + 1


def stale_groups(trained_step: int, oldest_versions: list[int], threshold: int) -> list[int]:
    """Indices of the groups whose age at `trained_step` is over the threshold (verl's drop strategy evicts them)."""
    return [i for i, v in enumerate(oldest_versions) if age(trained_step, v) > threshold]


def eviction_metrics(trained_step: int, evicted_oldest_versions: list[int]) -> dict[str, float]:
    """verl's counts of the groups evicted as stale before `trained_step`: training/off_policy/evicted_samples and
    the statistics of their ages (evicted_samples_staleness/{mean,max,min}); {} when none was."""
    if not evicted_oldest_versions:
        return {}
    ages = [age(trained_step, v) for v in evicted_oldest_versions]
    return {"training/off_policy/evicted_samples": float(len(ages)),
            "training/off_policy/evicted_samples_staleness/mean": sum(ages) / len(ages),
            "training/off_policy/evicted_samples_staleness/max": float(max(ages)),
            "training/off_policy/evicted_samples_staleness/min": float(min(ages))}
