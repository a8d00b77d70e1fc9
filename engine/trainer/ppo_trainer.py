"""The single-controller PPO/GRPO loop. It reads like the data flow:

    prompts → Rollout (generate) → Reward (score) → Actor (old log-probs) → Reference (ref log-probs)
            → Critic (values) → advantages → Critic update → Actor update → log

Every call on a role goes through the worker group, which splits the batch over the data-parallel
workers and joins the results.
"""
from __future__ import annotations

import contextlib
import math
import os
import time
import uuid
from collections import defaultdict

import torch

from engine.algos.advantages import compute_advantage
from engine.algos.kl import apply_kl_penalty, make_kl_controller
from engine.config.resolve import world_size
from engine.protocol import Batch
from engine.reward.manager import RewardResult
from engine.trainer import checkpointing
from engine.trainer.balance import balanced_order
from engine.trainer.hold import hold_after
from engine.trainer.metrics import data_metrics, mfu, reduce_worker_metrics, throughput_metrics, timing_metrics
from engine.trainer.rollout_mismatch import apply_rollout_correction, correction_enabled, rollout_mismatch_metrics
from engine.trainer.samples import build_samples, group_advantage_stats


@contextlib.contextmanager
def timed(name: str, timings: dict[str, float]):
    start = time.perf_counter()
    yield
    timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


class PPOTrainer:
    def __init__(self, cfg, tokenizer, train_loader, val_dataset, reward_fn, val_reward_fn, worker_group, logger,
                 total_steps: int, device_name: str | None = None, n_params: int | None = None):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.train_loader = train_loader
        self.val_dataset = val_dataset
        self.reward_fn, self.val_reward_fn = reward_fn, val_reward_fn
        self.wg = worker_group
        self.logger = logger
        self.total_steps = total_steps
        self.world = world_size(cfg)
        self.device_name = device_name
        self.n_params = n_params
        alg = cfg.algorithm
        self.use_critic = bool(cfg.critic.enable)
        self.use_reference = alg.use_kl_in_reward or cfg.actor_rollout_ref.actor.use_kl_loss
        self.kl_ctrl = make_kl_controller(alg.kl_ctrl.type, alg.kl_ctrl.kl_coef, alg.kl_ctrl.target_kl,
                                          alg.kl_ctrl.horizon) if alg.use_kl_in_reward else None
        actor = cfg.actor_rollout_ref.actor
        # One epoch over one mini-batch is on-policy: the rollout's log-probs under the current weights are
        # what the update's own forward computes, so the separate old-log-prob pass is skipped — unless
        # something needs them before the update (KL in the reward) or the user asks for the pass.
        self.on_policy_update = (actor.recompute_old_log_prob is not True and actor.ppo_epochs == 1
                                 and actor.ppo_mini_batch_size == cfg.data.train_batch_size
                                 and not alg.use_kl_in_reward and cfg.trainer.critic_warmup == 0
                                 and not correction_enabled(alg.rollout_correction))  # it needs them first
        self.global_step = 0
        self.ckpt_root = os.path.expanduser(cfg.trainer.default_local_dir)

    # ---- one training step ---------------------------------------------------------------------------
    def train_step(self, prompts: Batch) -> tuple[dict[str, float], list[dict]]:
        cfg, alg = self.cfg, self.cfg.algorithm
        timings: dict[str, float] = {}
        metrics: dict[str, float] = {}
        worker_metrics: dict[str, list[float]] = defaultdict(list)

        def merge(m):
            for k, v in m.items():
                worker_metrics[k].extend(v)

        with timed("step", timings):
            batch, reward = self._generate_and_score(prompts, timings)
            if alg.filter_groups.enable:
                batch, reward = self._keep_groups_with_signal(batch, reward, timings, metrics)
            if cfg.trainer.balance_batch and self.world > 1:  # equal token loads per worker
                order = balanced_order(batch["attention_mask"].sum(-1).tolist(), self.world)
                batch, reward = batch.index(order), reward.select(order)

            if not self.on_policy_update:
                with timed("old_log_prob", timings):
                    out, m = self.wg.dp_call("compute_log_prob", batch)
                    batch = batch.union(out)
                    merge(m)
                if correction_enabled(alg.rollout_correction):
                    metrics.update(apply_rollout_correction(batch, alg.rollout_correction))

            if self.use_reference:
                with timed("ref", timings):
                    out, _ = self.wg.dp_call("compute_ref_log_prob", batch)
                    batch = batch.union(out)

            if self.use_critic:
                with timed("values", timings):
                    out, _ = self.wg.dp_call("compute_values", batch)
                    batch = batch.union(out)

            with timed("adv", timings):
                mask = batch["response_mask"].float()
                if alg.use_kl_in_reward:
                    rewards, kl_metrics = apply_kl_penalty(batch["token_level_scores"], batch["old_log_probs"],
                                                           batch["ref_log_prob"], mask, self.kl_ctrl, alg.kl_penalty)
                    batch.tensors["token_level_rewards"] = rewards
                    metrics.update(kl_metrics)
                else:
                    batch.tensors["token_level_rewards"] = batch["token_level_scores"]
                advantages, returns = compute_advantage(
                    alg.adv_estimator, token_level_rewards=batch["token_level_rewards"], response_mask=mask,
                    values=batch.tensors.get("values"), index=batch["uid"], gamma=alg.gamma, lam=alg.lam,
                    norm_adv_by_std_in_grpo=alg.norm_adv_by_std_in_grpo,
                    reward_baselines=batch.tensors.get("reward_baselines"))
                batch.tensors["advantages"] = advantages
                batch.tensors["returns"] = returns

            if self.use_critic:
                with timed("update_critic", timings):
                    _, m = self.wg.dp_call("update_critic", batch)
                    merge(m)

            if self.global_step >= cfg.trainer.critic_warmup:
                with timed("update_actor", timings):
                    out, m = self.wg.dp_call("update_actor", batch)
                    batch = batch.union(out)  # on-policy: the update reports the old log-probs it used
                    merge(m)

        metrics.update(reduce_worker_metrics(worker_metrics))
        metrics.update(rollout_mismatch_metrics(batch) | metrics)  # rollout vs actor log-probs ({} for hf generate)
        metrics.update(data_metrics(batch, self.use_critic, cfg.actor_rollout_ref.rollout.response_length))
        metrics.update(group_advantage_stats(batch))
        metrics.update(timing_metrics(timings, batch))
        metrics.update(throughput_metrics(timings, batch, self.world))
        if "update_actor" in timings and self.n_params:
            tokens = int(batch["attention_mask"].sum().item()) * cfg.actor_rollout_ref.actor.ppo_epochs
            value = mfu(self.n_params, tokens, timings["update_actor"], self.device_name, self.world)
            if value is not None:
                metrics["perf/mfu/actor"] = value
        for k, v in reward.extra.items():  # numeric extras of a custom reward become metrics
            nums = [x for x in v if isinstance(x, (int, float)) and not isinstance(x, bool)]
            if nums and len(nums) == len(v):
                metrics[f"reward_extra/{k}/mean"] = sum(nums) / len(nums)
        samples = build_samples(batch, self.tokenizer, self.global_step, "train", reward.response_texts, reward.extra)
        return metrics, samples

    def _generate_and_score(self, prompts: Batch, timings: dict[str, float]):
        """n samples per prompt (one uid per prompt: GRPO groups) and their rewards."""
        n, alg = self.cfg.actor_rollout_ref.rollout.n, self.cfg.algorithm
        prompts.meta["uid"] = _object_array([uuid.uuid4().hex for _ in range(len(prompts))])
        prompts = prompts.repeat_interleave(n)
        prompts.info["global_step"] = self.global_step
        with timed("gen", timings):
            batch, _ = self.wg.dp_call("generate_sequences", prompts)
        if alg.adv_estimator == "remax":
            with timed("gen_max", timings):
                baseline, _ = self.wg.dp_call("generate_sequences", prompts, validate=True)
                batch.tensors["reward_baselines"] = self.reward_fn(baseline).token_level_scores.sum(-1)
        batch.info["global_step"] = self.global_step
        with timed("reward", timings):
            reward = self.reward_fn(batch)
            batch.tensors["token_level_scores"] = reward.token_level_scores
        return batch, reward

    def _keep_groups_with_signal(self, batch: Batch, reward, timings: dict[str, float], metrics: dict[str, float]):
        """DAPO dynamic sampling (algorithm.filter_groups): keep the groups whose metric differs between samples;
        generate from further prompts until train_batch_size groups are kept, then cut to exactly that many."""
        from engine.algos.dynamic_sampling import rows_with_signal

        fg, want = self.cfg.algorithm.filter_groups, self.cfg.data.train_batch_size
        kept_batches, kept_rewards, kept_groups, seen_groups, num_gen = [], [], 0, 0, 0
        while True:
            num_gen += 1
            rows, kept, seen = rows_with_signal(_filter_metric(batch, reward, fg.metric), batch["uid"])
            kept_batches.append(batch.index(torch.tensor(rows, dtype=torch.long)))  # long even when empty
            kept_rewards.append(reward.select(rows))
            kept_groups, seen_groups = kept_groups + kept, seen_groups + seen
            if kept_groups >= want:
                break
            if 0 < fg.max_num_gen_batches <= num_gen:
                raise RuntimeError(
                    f"algorithm.filter_groups: {num_gen} generation batches gave {kept_groups} of {want} groups whose "
                    f"samples score differently (max_num_gen_batches={fg.max_num_gen_batches}); the data may be too "
                    "easy or too hard for the model: raise max_num_gen_batches (<= 0: no limit) or change the data")
            batch, reward = self._generate_and_score(next(self.train_loader), timings)
        rows = list(range(want * self.cfg.actor_rollout_ref.rollout.n))
        batch, reward = Batch.concat(kept_batches).index(rows), RewardResult.concat(kept_rewards).select(rows)
        metrics["train/num_gen_batches"] = num_gen
        metrics["train/kept_group_fraction"] = kept_groups / seen_groups
        return batch, reward

    # ---- validation ----------------------------------------------------------------------------------
    def validate(self) -> tuple[dict[str, float], list[dict]]:
        if self.val_dataset is None or len(self.val_dataset) == 0:
            return {}, []
        from engine.data.dataset import collate

        cfg = self.cfg
        val_kwargs = cfg.actor_rollout_ref.rollout.val_kwargs
        n_val = val_kwargs.n
        size = cfg.data.val_batch_size or len(self.val_dataset)
        scores_by_source: dict[str, list[float]] = defaultdict(list)
        samples: list[dict] = []
        start = time.perf_counter()
        for lo in range(0, len(self.val_dataset), size):
            items = [self.val_dataset[i] for i in range(lo, min(lo + size, len(self.val_dataset)))]
            prompts = collate(items, self.val_dataset.pad_token_id)
            prompts.meta["uid"] = _object_array([f"val-{p}" for p in prompts["prompt_index"]])
            prompts = prompts.repeat_interleave(n_val)
            # pad so that the chunks split evenly over the workers, then drop the padding
            pad = (-len(prompts)) % self.world
            padded = Batch.concat([prompts, prompts.slice(0, pad)]) if pad else prompts
            out, _ = self.wg.dp_call("generate_sequences", padded, validate=True)
            out = out.slice(0, len(prompts))
            reward = self.val_reward_fn(out)
            out.tensors["token_level_scores"] = reward.token_level_scores
            for src, s in zip(out["data_source"], reward.scores):
                scores_by_source[str(src)].append(float(s))
            samples.extend(build_samples(out, self.tokenizer, self.global_step, "val", reward.response_texts,
                                         reward.extra, token_level=False))
        metrics = {f"val-core/{src}/reward/mean@{n_val}": sum(v) / len(v) for src, v in scores_by_source.items()}
        metrics["timing_s/validation"] = time.perf_counter() - start
        return metrics, samples

    # ---- the loop ------------------------------------------------------------------------------------
    def fit(self) -> None:
        cfg = self.cfg
        tr = cfg.trainer
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
            if tr.save_freq > 0 and (self.global_step % tr.save_freq == 0 or last):
                with timed("save_checkpoint", metrics_timings := {}):
                    checkpointing.save(self)
                metrics["timing_s/save_checkpoint"] = metrics_timings["save_checkpoint"]
            if self.global_step == 1 or last:
                for stats in self.wg.all_call("memory_stats")[:1]:
                    metrics.update(stats)
            _check_finite(metrics)
            dump_generations(cfg.trainer.rollout_data_dir, self.global_step, [x for x in samples if x["split"] == "train"])
            dump_generations(cfg.trainer.validation_data_dir, self.global_step,
                             [x for x in samples if x["split"] == "val"])
            self.logger.log_metrics(self.global_step, metrics)
            self.logger.log_samples(self.global_step, samples)
            hold_after(self.global_step)

        if tr.export_hf_model:
            self.wg.all_call("export_hf", os.path.join(self.ckpt_root, "hf_model"))


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
    import json

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
    import numpy as np

    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr
