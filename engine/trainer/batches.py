"""Where each step's scored batch comes from: the one question the trainer asks ("the next scored batch"), with two
answers. `SyncBatches` generates it when the step asks, on the actor's current weights; `AsyncBatches`
(asynchronous/driver.py) takes the one its rollout thread generated ahead on the behaviour copy. Both have:

    prompts(step)              the step's prompts (the loop reads their epoch)
    scored(prompts, step, log) -> Selection: the batch with `token_level_scores`, its reward, what was evicted
    after_update(step)         -> metrics: the step's weights are trained (the async modes publish them)
    state_dict / load_state_dict, close

and the pieces both use: `group_prompts` and `Scorer`.
"""
from __future__ import annotations

import uuid

import numpy as np

from engine.protocol import Batch
from engine.reward.manager import RewardComputeError, RewardResult
from engine.rollout import versions
from engine.trainer import failed_groups
from engine.trainer.group_selection import Selection, keep_groups
from engine.trainer.learning_signal import zero_std_groups
from engine.trainer.roles import RolloutRole, StepLog


def object_array(values) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def group_prompts(prompts: Batch, n: int, step: int) -> Batch:
    """Each prompt with a uid (its GRPO group), repeated `n` (rollout.n) times, for step `step`."""
    prompts.meta["uid"] = object_array([uuid.uuid4().hex for _ in range(len(prompts))])
    prompts = prompts.repeat_interleave(n)
    prompts.info["global_step"] = step
    return prompts


class Scorer:
    """The answers' rewards (`token_level_scores`) and the learning-signal counts. Touches nothing but the step's
    log: the async rollout thread scores its batches with it when the groups are selected there."""

    def __init__(self, reward_fn):
        self.reward_fn = reward_fn

    def __call__(self, batch: Batch, log: StepLog) -> tuple[Batch, RewardResult]:
        with log.phase("reward"):
            reward = self.reward_fn(batch)
            batch.tensors["token_level_scores"] = reward.token_level_scores
        # learning signal, counted on every generated group (before DAPO's filter drops the ones without)
        zero, groups = zero_std_groups(batch["token_level_scores"].sum(-1), batch["uid"])
        log.counts["zero_std_groups"] += zero
        log.counts["groups"] += groups
        return batch, reward


def select_groups(cfg, batch: Batch, reward: RewardResult, more, step: int, sync: bool) -> Selection:
    """keep_groups with the run's settings."""
    return keep_groups(batch, reward, more, want=cfg.data.train_batch_size, rollout_n=cfg.actor_rollout_ref.rollout.n,
                       filter_groups=cfg.algorithm.filter_groups, step=step, sync=sync)


class SyncBatches:
    """Each step's batch generated when the step asks for it, on the actor's current weights. `selects`: DAPO's
    filter or failed-group refills are on (refills come from the loader's next prompts)."""
    is_async = False

    def __init__(self, cfg, loader, rollout: RolloutRole, scorer: Scorer, selects: bool):
        self.cfg, self.loader, self.rollout, self.scorer, self.selects = cfg, loader, rollout, scorer, selects

    def prompts(self, step: int) -> Batch:
        return next(self.loader)

    def scored(self, prompts: Batch, step: int, log: StepLog) -> Selection:
        batch, reward = self.generate_and_score(prompts, step, log)
        if not self.selects:
            return Selection(batch, reward)

        def more(count: int | None = None):
            return self.generate_and_score(failed_groups.first_prompts(next(self.loader), count), step, log)

        selection = select_groups(self.cfg, batch, reward, more, step, sync=True)
        log.metrics.update(selection.metrics)
        return selection

    def generate_and_score(self, prompts: Batch, step: int, log: StepLog) -> tuple[Batch, RewardResult]:
        """n samples per prompt (one uid per prompt: GRPO groups), each token stamped with the policy version that
        produced it (the actor's updates so far), and their rewards."""
        prompts = group_prompts(prompts, self.cfg.actor_rollout_ref.rollout.n, step)
        with log.phase("gen"):
            batch = self.rollout.generate(prompts, log)
            batch.tensors[versions.KEY] = versions.stamp(batch["responses"], step - 1)
        if self.cfg.algorithm.adv_estimator == "remax":
            with log.phase("gen_max"):  # the baseline: the reward of the greedy (validation-mode) answer
                baseline = self.rollout.generate(prompts, validate=True)
                base = self.scorer.reward_fn(baseline)
                if base.failed:  # a baseline is no group to refill: its reward function's error fails the run
                    raise RewardComputeError(base.failed[min(base.failed)])
                batch.tensors["reward_baselines"] = base.token_level_scores.sum(-1)
        batch.info["global_step"] = step
        return self.scorer(batch, log)

    def after_update(self, step: int) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)

    def close(self) -> None:
        pass
