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

import torch

from engine.algos.kl import make_kl_controller
from engine.config.resolve import uses_reference, world_size
from engine.config.trainer_mode import is_async
from engine.data.dataset import collate
from engine.protocol import Batch
from engine.reward.manager import RewardResult
from engine.reward.reward_model import ModelReward
from engine.rollout import registry as rollout_registry
from engine.rollout import versions
from engine.rollout.metrics import agent_metrics
from engine.trainer import checkpointing
from engine.trainer import failed_groups as failed_groups_module
from engine.trainer.advantages import compute_advantages
from engine.trainer.asynchronous.driver import AsyncBatches
from engine.trainer.balance import balanced_order
from engine.trainer.batches import Scorer, SyncBatches, object_array
from engine.trainer.group_selection import Evicted
from engine.trainer.heartbeat import Heartbeat
from engine.trainer.hooks import after_step_hook
from engine.trainer.learning_signal import METRIC as ZERO_STD_GROUP_RATIO
from engine.trainer.metrics import step_metrics
from engine.trainer.roles import ActorRole, CriticRole, ReferenceRole, RewardModelRole, RolloutRole, StepLog
from engine.trainer.rollout_mismatch import apply_rollout_correction, bypass_old_log_probs, correction_enabled
from engine.trainer.samples import build_samples
from engine.trainer.validation_metrics import validation_metrics


class PPOTrainer:
    def __init__(self, cfg, tokenizer, train_loader, val_dataset, reward_fn, val_reward_fn, worker_group, logger,
                 total_steps: int, device_name: str | None = None, n_params: int | None = None):
        self.cfg = cfg
        self.tokenizer = tokenizer
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
        # where each step's scored batch comes from (batches.py): generated now, or by the async modes' rollout thread
        scorer = Scorer(self.reward_fn)
        self.batches = (AsyncBatches(cfg, train_loader, worker_group, scorer, self.heartbeat, self.selects_groups)
                        if is_async(cfg) else SyncBatches(cfg, train_loader, self.rollout, scorer, self.selects_groups))

    # ---- one training step ---------------------------------------------------------------------------
    def train_step(self, prompts: Batch) -> tuple[dict[str, float], list[dict]]:
        cfg, alg = self.cfg, self.cfg.algorithm
        log = StepLog(on_enter=self._enter_phase)
        with log.phase("step"):
            selection = self.batches.scored(prompts, self.global_step, log)
            batch, reward = selection.batch, selection.reward
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
        metrics = self.step_metrics(batch, log, reward) | self.batches.after_update(self.global_step)
        return metrics, samples + self.evicted_samples(selection.evicted, self.global_step)

    def evicted_samples(self, evicted: list[Evicted], step: int) -> list[dict]:
        """The answers of the evicted groups never reach the update, but they show what the filter dropped (prompts
        with no learning signal) or what failed: they go to the samples store (answers and scores, no token arrays),
        marked `dropped` with the reason."""
        samples = []
        for part in evicted:
            found = build_samples(part.batch, self.tokenizer, step, "train", part.reward.response_texts,
                                  part.reward.extra, token_level=False)
            for i, sample in enumerate(found):
                if not part.failed:
                    sample["dropped"] = "algorithm.filter_groups: no learning signal"
                elif i in part.reward.failed:
                    sample["dropped"] = f"rollout_failure: {part.reward.failed[i]}"
                else:
                    sample["dropped"] = "rollout_failure: another answer of its group failed"
            samples += found
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
            prompts.meta["uid"] = object_array([f"val-{p}" for p in prompts["prompt_index"]])
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

        try:
            self._loop()
        finally:
            self.batches.close()  # the async modes: stop the rollout thread

    def _loop(self) -> None:
        cfg, tr = self.cfg, self.cfg.trainer
        while self.global_step < self.total_steps:
            prompts = self.batches.prompts(self.global_step + 1)
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
