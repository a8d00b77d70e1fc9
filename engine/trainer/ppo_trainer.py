"""The single-controller PPO/GRPO loop. It reads like the data flow:

    prompts → Rollout (generate) → Reward (score) → Actor (old log-probs) → Reference (ref log-probs)
            → Critic (values) → advantages → Critic update → Actor update → log

Every call on a role goes through its handle (engine/trainer/roles.py) and the worker group, which splits
the batch over the data-parallel workers and joins the results.
"""
from __future__ import annotations

import copy
import json
import math
import os
import time
import uuid
from collections.abc import Callable

import numpy as np
import torch

from engine.algos.dynamic_sampling import rows_with_signal
from engine.algos.kl import make_kl_controller
from engine.config.resolve import uses_reference, world_size
from engine.data.dataset import collate
from engine.protocol import Batch
from engine.reward.manager import RewardComputeError, RewardResult
from engine.reward.reward_model import ModelReward
from engine.rollout import registry as rollout_registry
from engine.rollout import versions
from engine.rollout.metrics import agent_metrics
from engine.trainer import checkpointing
from engine.trainer import failed_groups as failed_groups_module
from engine.trainer.advantages import compute_advantages
from engine.trainer.balance import balanced_order
from engine.trainer.heartbeat import Heartbeat
from engine.trainer.hooks import after_step_hook
from engine.trainer.learning_signal import METRIC as ZERO_STD_GROUP_RATIO
from engine.trainer.learning_signal import zero_std_groups
from engine.trainer.metrics import step_metrics
from engine.trainer.roles import ActorRole, CriticRole, ReferenceRole, RewardModelRole, RolloutRole, StepLog
from engine.trainer.rollout_mismatch import apply_rollout_correction, bypass_old_log_probs, correction_enabled
from engine.trainer.samples import build_samples
from engine.trainer.validation_metrics import validation_metrics


class PPOTrainer:
    is_async = False  # the async modes' trainer (asynchronous/driver.py) says so: failures' errors differ

    def __init__(self, cfg, tokenizer, train_loader, val_dataset, reward_fn, val_reward_fn, worker_group, logger,
                 total_steps: int, device_name: str | None = None, n_params: int | None = None):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.train_loader = train_loader
        self.val_dataset = val_dataset
        # failed groups (a reward function that raised): evicted and refilled, or the error fails the run
        self.refills_failed = failed_groups_module.refills_failed_groups(cfg)
        if self.refills_failed and hasattr(reward_fn, "mark_failures"):  # training's copy marks failed rows;
            reward_fn = copy.copy(reward_fn)  # validation's still raises
            reward_fn.mark_failures = True
        if cfg.reward_model.enable:  # the reward model's score, computed on the workers, joins the reward
            self.reward_model = RewardModelRole(worker_group)
            reward_fn, val_reward_fn = ModelReward(reward_fn, self.reward_model), ModelReward(val_reward_fn,
                                                                                              self.reward_model)
        self.reward_fn, self.val_reward_fn = reward_fn, val_reward_fn
        self.wg = worker_group  # group-wide calls (checkpoints, export, memory); the roles below split batches
        self.pending_checkpoint: int | None = None  # a step whose checkpoint is still being written
        self.rollout, self.actor = RolloutRole(worker_group), ActorRole(worker_group)
        self.reference, self.critic = ReferenceRole(worker_group), CriticRole(worker_group)
        self.logger = logger
        self.heartbeat = Heartbeat(logger)  # the phase the loop is in, for the server's stall check
        self.total_steps = total_steps
        self.world = world_size(cfg)
        self.device_name = device_name
        self.n_params = n_params
        alg = cfg.algorithm
        self.use_critic = bool(cfg.critic.enable)
        self.use_reference = uses_reference(cfg)
        self.kl_ctrl = make_kl_controller(alg.kl_ctrl.type, alg.kl_ctrl.kl_coef, alg.kl_ctrl.target_kl,
                                          alg.kl_ctrl.horizon) if alg.use_kl_in_reward else None
        actor = cfg.actor_rollout_ref.actor
        # One epoch over one mini-batch is on-policy: the rollout's log-probs under the current weights are
        # what the update's own forward computes, so the separate old-log-prob pass is skipped — unless
        # something needs them before the update (KL in the reward) or the user asks for the pass.
        self.on_policy_update = (actor.recompute_old_log_prob is not True and actor.ppo_epochs == 1
                                 and actor.ppo_mini_batch_size == cfg.data.train_batch_size
                                 and not alg.use_kl_in_reward and cfg.trainer.critic_warmup == 0
                                 and not correction_enabled(alg.rollout_correction)  # it needs them first
                                 and not alg.rollout_correction.bypass_mode)  # old = the rollout's, as asked
        # vLLM holds its own copy of the weights, streamed in after every update; the HF rollout uses the actor's
        self.rollout_has_own_weights = rollout_registry.backend(cfg.actor_rollout_ref.rollout).own_weights
        self.global_step = 0
        self.after_step = after_step_hook()  # RLSTUDIO_AFTER_STEP, or None
        self.ckpt_root = os.path.expanduser(cfg.trainer.default_local_dir)
        self.selects_groups = bool(alg.filter_groups.enable) or self.refills_failed

    # ---- one training step ---------------------------------------------------------------------------
    def train_step(self, prompts: Batch) -> tuple[dict[str, float], list[dict]]:
        cfg, alg = self.cfg, self.cfg.algorithm
        log = StepLog(on_enter=self._enter_phase)
        self.dropped_samples: list[dict] = []  # DAPO's dropped groups, kept for the samples store
        with log.phase("step"):
            batch, reward = self.scored_batch(prompts, log)
            if cfg.trainer.balance_batch and self.world > 1:  # equal token loads per worker
                order = balanced_order(batch["attention_mask"].sum(-1).tolist(), self.world)
                batch, reward = batch.index(order), reward.select(order)
            if alg.rollout_correction.bypass_mode:  # verl's bypass: the rollout's log-probs are the old ones
                batch.tensors["old_log_probs"] = bypass_old_log_probs(batch)
            elif not self.on_policy_update:
                with log.phase("old_log_prob"):
                    batch = self.actor.compute_log_prob(batch, log)
                if correction_enabled(alg.rollout_correction):  # needs the old and the rollout's log-probs
                    log.metrics.update(apply_rollout_correction(batch, alg.rollout_correction))
            if self.use_reference:
                with log.phase("ref"):
                    batch = self.reference.compute_log_prob(batch, log)
            if self.use_critic:
                with log.phase("values"):
                    batch = self.critic.compute_values(batch, log)
            with log.phase("adv"):
                batch, kl_metrics = compute_advantages(batch, alg, self.kl_ctrl)
                log.metrics.update(kl_metrics)
            if self.use_critic:
                with log.phase("update_critic"):
                    batch = self.critic.update(batch, log)
            if self.global_step >= cfg.trainer.critic_warmup:
                with log.phase("update_actor"):
                    batch = self.actor.update(batch, log)
                if self.rollout_has_own_weights:  # its own phase: a hung sync is named as one
                    with log.phase("sync_weights"):
                        self.rollout.sync_weights(log)
        samples = build_samples(batch, self.tokenizer, self.global_step, "train", reward.response_texts, reward.extra)
        return self.step_metrics(batch, log, reward), samples + self.dropped_samples

    def scored_batch(self, prompts: Batch, log: StepLog) -> tuple[Batch, RewardResult]:
        """The step's answers and their rewards. With DAPO's dynamic sampling (algorithm.filter_groups) only the
        groups with a learning signal, and where failed groups are refilled (failed_groups.py) only the groups whose
        reward function did not fail, refilled from the loader's next prompts until the batch is full."""
        batch, reward = self.generate_and_score(prompts, log)
        if self.selects_groups:
            def more(count: int | None = None):
                return self.generate_and_score(failed_groups_module.first_prompts(next(self.train_loader), count), log)

            batch, reward, self.dropped_samples = self.keep_groups(batch, reward, log, self.global_step, more)
        return batch, reward

    def generate_and_score(self, prompts: Batch, log: StepLog) -> tuple[Batch, RewardResult]:
        """n samples per prompt (one uid per prompt: GRPO groups) and their rewards (`token_level_scores`)."""
        prompts = self.group_prompts(prompts)
        with log.phase("gen"):  # async: the wait for the rollout's batch (verl's timing_s/gen)
            batch = self.generate(prompts, log)
        if self.cfg.algorithm.adv_estimator == "remax":
            with log.phase("gen_max"):  # the baseline: the reward of the greedy (validation-mode) answer
                baseline = self.rollout.generate(prompts, validate=True)
                base = self.reward_fn(baseline)
                if base.failed:  # a baseline is no group to refill: its reward function's error fails the run
                    raise RewardComputeError(base.failed[min(base.failed)])
                batch.tensors["reward_baselines"] = base.token_level_scores.sum(-1)
        batch.info["global_step"] = self.global_step
        return self.score(batch, log)

    def score(self, batch: Batch, log: StepLog) -> tuple[Batch, RewardResult]:
        """The answers' rewards (`token_level_scores`). Touches no trainer state but `log`: the async rollout thread
        scores its batches with it when DAPO's filter needs the rewards there."""
        with log.phase("reward"):
            reward = self.reward_fn(batch)
            batch.tensors["token_level_scores"] = reward.token_level_scores
        # learning signal, counted on every generated group (before DAPO's filter drops the ones without)
        zero, groups = zero_std_groups(batch["token_level_scores"].sum(-1), batch["uid"])
        log.counts["zero_std_groups"] += zero
        log.counts["groups"] += groups
        return batch, reward

    def group_prompts(self, prompts: Batch) -> Batch:
        """Each prompt with a uid (its GRPO group), repeated rollout.n times."""
        prompts.meta["uid"] = _object_array([uuid.uuid4().hex for _ in range(len(prompts))])
        prompts = prompts.repeat_interleave(self.cfg.actor_rollout_ref.rollout.n)
        prompts.info["global_step"] = self.global_step
        return prompts

    def generate(self, prompts: Batch, log: StepLog) -> Batch:
        """The rollout's answers, each token stamped with the policy version that produced it: the actor's
        updates so far (the async trainer, engine/trainer/asynchronous/, generates on a copy of its own)."""
        batch = self.rollout.generate(prompts, log)
        batch.tensors[versions.KEY] = versions.stamp(batch["responses"], self.global_step - 1)
        return batch

    def keep_groups(self, batch: Batch, reward: RewardResult, log: StepLog, step: int,
                    more: Callable[..., tuple[Batch, RewardResult]]):
        """Evict the groups the step cannot train and refill from `more()` until train_batch_size groups are kept,
        then cut to exactly that many: failed groups (a row in reward.failed; failed_groups.py) and, with DAPO's
        dynamic sampling (algorithm.filter_groups), the groups whose metric does not differ between samples.
        DAPO's refills are whole loader batches (`more()`), a failure's alone exactly the missing groups
        (`more(k)`). Returns the kept batch, its reward and the evicted groups' samples (of step `step`). Touches no
        trainer state but `log` (the async rollout thread runs it for the batches it makes ahead)."""
        fg, want = self.cfg.algorithm.filter_groups, self.cfg.data.train_batch_size
        kept_batches, kept_rewards, kept_groups, seen_groups, num_gen = [], [], 0, 0, 0
        no_signal = failed_groups = 0
        first_failure: str | None = None
        dropped: list[dict] = []
        while True:
            num_gen += 1
            rows, failed = failed_groups_module.rows_without_failures(reward.failed, batch["uid"])
            if failed:
                first_failure = first_failure or reward.failed[min(reward.failed)]
                failed_groups += len(failed)
                dropped.extend(self.dropped_group_samples(batch, reward, rows, step, failed=True))
                batch, reward = batch.index(torch.tensor(rows, dtype=torch.long)), reward.select(rows)
            seen = len(set(batch["uid"].tolist())) if len(batch) else 0
            kept = seen
            if fg.enable:  # among the groups that scored without error
                rows, kept, seen = rows_with_signal(_filter_metric(batch, reward, fg.metric), batch["uid"])
                dropped.extend(self.dropped_group_samples(batch, reward, rows, step))
                batch, reward = batch.index(torch.tensor(rows, dtype=torch.long)), reward.select(rows)
                no_signal += seen - kept
            kept_batches.append(batch)
            kept_rewards.append(reward)
            kept_groups, seen_groups = kept_groups + kept, seen_groups + seen + len(failed)
            if kept_groups >= want:
                break
            dapo_limit = fg.enable and 0 < fg.max_num_gen_batches
            limit = fg.max_num_gen_batches if dapo_limit else failed_groups_module.MAX_GEN_BATCHES
            if failed_groups and num_gen >= limit:
                raise failed_groups_module.limit_error(
                    first_failure, failed_groups, num_gen, kept_groups, want, step,
                    sync=not self.is_async, limit=limit,
                    limit_key="algorithm.filter_groups.max_num_gen_batches" if dapo_limit else None)
            if dapo_limit and fg.max_num_gen_batches <= num_gen:
                raise RuntimeError(
                    f"algorithm.filter_groups: {num_gen} generation batches gave {kept_groups} of {want} groups whose "
                    f"samples score differently (max_num_gen_batches={fg.max_num_gen_batches}); the data may be too "
                    "easy or too hard for the model: raise max_num_gen_batches (<= 0: no limit) or change the data")
            batch, reward = more() if fg.enable else more(want - kept_groups)
        if not fg.enable and not failed_groups:  # nothing evicted: the batch as generated, and no metrics
            return batch, reward, dropped
        rows = list(range(want * self.cfg.actor_rollout_ref.rollout.n))
        batch, reward = Batch.concat(kept_batches).index(rows), RewardResult.concat(kept_rewards).select(rows)
        log.metrics["train/num_gen_batches"] = num_gen
        log.metrics["train/kept_group_fraction"] = kept_groups / seen_groups
        if fg.enable:  # verl V1's counts, in groups: dropped for no signal, and kept ones cut to fit the batch
            log.metrics["training/filter_groups/evicted_samples"] = no_signal
            log.metrics["training/filter_groups/discarded_surplus_samples"] = kept_groups - want
        if failed_groups:  # verl V1's count of evicted failed groups (only logged when some were, as verl's)
            log.metrics[failed_groups_module.METRIC] = failed_groups
        return batch, reward, dropped

    def dropped_group_samples(self, batch: Batch, reward: RewardResult, kept_rows: list[int], step: int,
                              failed: bool = False) -> list[dict]:
        """The answers of the evicted groups never reach the update, but they show what the filter dropped (prompts
        with no learning signal) or what failed: they go to the samples store (answers and scores, no token arrays),
        marked `dropped` with the reason."""
        kept = set(kept_rows)
        rows = [i for i in range(len(batch)) if i not in kept]
        if not rows:
            return []
        part = reward.select(rows)
        samples = build_samples(batch.index(torch.tensor(rows, dtype=torch.long)), self.tokenizer, step,
                                "train", part.response_texts, part.extra, token_level=False)
        for i, sample in enumerate(samples):
            if not failed:
                sample["dropped"] = "algorithm.filter_groups: no learning signal"
            elif i in part.failed:
                sample["dropped"] = f"rollout_failure: {part.failed[i]}"
            else:
                sample["dropped"] = "rollout_failure: another answer of its group failed"
        return samples

    def step_metrics(self, batch: Batch, log: StepLog, reward: RewardResult) -> dict[str, float]:
        cfg = self.cfg.actor_rollout_ref
        metrics = step_metrics(batch, log, reward, use_critic=self.use_critic, world=self.world,
                               max_response_length=cfg.rollout.response_length, n_params=self.n_params,
                               device_name=self.device_name, ppo_epochs=cfg.actor.ppo_epochs)
        if versions.KEY in batch.tensors:  # verl's training/off_policy/* (0 staleness, span 1 when synchronous)
            metrics.update(versions.off_policy_metrics(batch[versions.KEY], batch["response_mask"], self.global_step))
        if log.counts["groups"]:  # rollout.n > 1
            metrics[ZERO_STD_GROUP_RATIO] = log.counts["zero_std_groups"] / log.counts["groups"]
        return metrics | agent_metrics(batch)  # multi-turn rollouts: turns, tool calls, errors, latency

    # ---- validation ----------------------------------------------------------------------------------
    def validate(self) -> tuple[dict[str, float], list[dict]]:
        if self.val_dataset is None or len(self.val_dataset) == 0:
            return {}, []
        self.heartbeat.enter("validation", self.global_step)
        cfg = self.cfg
        val_kwargs = cfg.actor_rollout_ref.rollout.val_kwargs
        n_val = val_kwargs.n
        size = cfg.data.val_batch_size or len(self.val_dataset)
        sources: list[str] = []
        uids: list[str] = []
        rewards: list[RewardResult] = []
        samples: list[dict] = []
        turns: list = []
        start = time.perf_counter()
        for lo in range(0, len(self.val_dataset), size):
            items = [self.val_dataset[i] for i in range(lo, min(lo + size, len(self.val_dataset)))]
            prompts = collate(items, self.val_dataset.pad_token_id)
            prompts.meta["uid"] = _object_array([f"val-{p}" for p in prompts["prompt_index"]])
            out = self.rollout.generate(prompts.repeat_interleave(n_val), validate=True)
            reward = self.val_reward_fn(out)
            out.tensors["token_level_scores"] = reward.token_level_scores
            sources.extend(str(src) for src in out["data_source"])
            uids.extend(str(uid) for uid in out["uid"])
            rewards.append(reward)
            if "turns" in out:
                turns.extend(out["turns"])
            samples.extend(build_samples(out, self.tokenizer, self.global_step, "val", reward.response_texts,
                                         reward.extra, token_level=False))
        reward = RewardResult.concat(rewards)  # verl's statistics over each prompt's n_val answers
        metrics = validation_metrics(sources, uids, reward.scores, reward.extra)
        metrics |= agent_metrics(Batch(meta={"turns": turns}), prefix="val-aux/") if turns else {}
        metrics["timing_s/validation"] = time.perf_counter() - start
        return metrics, samples

    # ---- the loop ------------------------------------------------------------------------------------
    def fit(self) -> None:
        cfg = self.cfg
        tr = cfg.trainer
        self.heartbeat.enter("load_checkpoint", self.global_step)  # resuming (passes at once with no checkpoint)
        self.global_step = checkpointing.maybe_resume(self)
        self.logger.log_status("running", step=self.global_step, total_steps=self.total_steps)

        if tr.val_before_train and self.global_step == 0 and self.val_dataset is not None:
            val_metrics, val_samples = self.validate()
            self.logger.log_metrics(0, val_metrics)
            self.logger.log_samples(0, val_samples)
            if tr.val_only:
                return

        while self.global_step < self.total_steps:
            prompts = next(self.train_loader)
            epoch = prompts.info.get("epoch", 0)
            self.global_step += 1
            metrics, samples = self.train_step(prompts)
            metrics["training/global_step"] = self.global_step
            metrics["training/epoch"] = epoch
            metrics["training/total_steps"] = self.total_steps
            last = self.global_step == self.total_steps
            if tr.test_freq > 0 and (self.global_step % tr.test_freq == 0 or last):
                val_metrics, val_samples = self.validate()
                metrics.update(val_metrics)
                samples.extend(val_samples)
            waited = checkpointing.complete(self, wait=False)  # an earlier step's background write, if done
            if tr.save_freq > 0 and (self.global_step % tr.save_freq == 0 or last):
                self.heartbeat.enter("save_checkpoint", self.global_step)
                start = time.perf_counter()
                checkpointing.save(self)  # async_save: blocks while the state is copied, writes in the background
                metrics["timing_s/save_checkpoint"] = time.perf_counter() - start
            if waited is not None:
                metrics["timing_s/save_checkpoint_wait"] = waited
            if self.global_step == 1 or last:
                for stats in self.wg.all_call("memory_stats")[:1]:
                    metrics.update(stats)
            _check_finite(metrics)
            dump_generations(cfg.trainer.rollout_data_dir, self.global_step,  # the trained batch, as verl's
                             [x for x in samples if x["split"] == "train" and not x.get("dropped")])
            dump_generations(cfg.trainer.validation_data_dir, self.global_step,
                             [x for x in samples if x["split"] == "val"])
            self.logger.log_metrics(self.global_step, metrics)
            self.logger.log_samples(self.global_step, samples)
            if self.after_step is not None:
                self.after_step(self.global_step, self)

        self.wait_for_checkpoint()
        if tr.export_hf_model:
            self.heartbeat.enter("export_hf_model", self.global_step)
            self.wg.all_call("export_hf", os.path.join(self.ckpt_root, "hf_model"))


    def _enter_phase(self, name: str) -> None:
        if name != "step":  # "step" wraps the whole step; the heartbeat names the phase inside it
            self.heartbeat.enter(name, self.global_step)

    def wait_for_checkpoint(self) -> None:
        """Block until the background checkpoint write (if any) is done."""
        if self.pending_checkpoint is not None:
            self.heartbeat.enter("save_checkpoint_wait", self.global_step)
        checkpointing.complete(self, wait=True)


def _filter_metric(batch: Batch, reward, name: str) -> torch.Tensor:
    """Per-row value that must differ within a group (verl's filter_groups.metric)."""
    if name in ("reward", "seq_reward", "seq_final_reward"):  # final = after the KL penalty, which is refused with filtering
        return batch["token_level_scores"].sum(-1)
    column = reward.extra.get(name)
    if column is not None and all(isinstance(x, (int, float)) for x in column):
        return torch.tensor([float(x) for x in column])
    return torch.tensor(reward.scores if name == "score" or column is None else [float(x) for x in column])


def dump_generations(directory: str | None, step: int, samples: list[dict]) -> None:
    """verl's rollout_data_dir / validation_data_dir: one JSON-lines file of generations per step."""
    if not directory or not samples:
        return
    directory = os.path.expanduser(directory)
    os.makedirs(directory, exist_ok=True)
    keep = ("prompt", "response", "score", "reward", "ground_truth", "data_source", "prompt_index", "step")
    with open(os.path.join(directory, f"{step}.jsonl"), "w", encoding="utf-8") as f:
        for sample in samples:
            f.write(json.dumps({k: sample.get(k) for k in keep}, default=str) + "\n")


def _check_finite(metrics: dict[str, float]) -> None:
    for k, v in list(metrics.items()):
        if isinstance(v, torch.Tensor):
            metrics[k] = v = float(v)
        if isinstance(v, float) and not math.isfinite(v):
            metrics.setdefault("health/nonfinite_metrics", 0)
            metrics["health/nonfinite_metrics"] += 1


def _object_array(values):
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr
