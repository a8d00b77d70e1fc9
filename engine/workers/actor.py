"""Actor: the policy being trained. Recomputes log-probs of the rollouts and runs the PPO update."""
from __future__ import annotations

import torch

from engine.algos.kl import kl_penalty
from engine.algos.losses import agg_loss, get_policy_loss
from engine.protocol import Batch
from engine.workers.forward import MODEL_INPUTS, batched_log_probs, micro_batches, pad_to, response_log_probs, unpermute
from engine.workers.fsdp import accumulate, clip_grad_norm, to_floats
from engine.workers.loss_weights import micro_batch_weights

UPDATE_INPUTS = MODEL_INPUTS + ("responses", "response_mask", "old_log_probs", "advantages")


class Actor:
    def __init__(self, module, optimizer, scheduler, actor_cfg, *, temperature: float, rollout_n: int, world: int,
                 remove_padding: bool = False):
        self.module, self.optimizer, self.scheduler = module, optimizer, scheduler
        self.remove_padding = remove_padding  # actor_rollout_ref.model.use_remove_padding: packed micro-batches
        self.cfg = actor_cfg
        self.temperature = temperature
        self.mini_batch = actor_cfg.ppo_mini_batch_size * rollout_n // world  # sequences per worker per step
        self.micro_batch = actor_cfg.ppo_micro_batch_size_per_gpu
        # use_dynamic_bsz: micro-batches sized by a token budget instead of a row count
        self.max_tokens = actor_cfg.ppo_max_token_len_per_gpu if actor_cfg.use_dynamic_bsz else None
        self.world = world

    def compute_log_prob(self, batch: Batch, micro: int, max_tokens: int | None = None):
        self.module.eval()
        return batched_log_probs(self.module, batch, micro, self.temperature, calc_entropy=True,
                                 max_tokens=max_tokens, remove_padding=self.remove_padding)

    def update_policy(self, batch: Batch) -> tuple[dict[str, list[float]], Batch]:
        """PPO update. Without `old_log_probs` in the batch the update is on-policy (one epoch, one
        mini-batch): the old log-probs are the current ones, taken from this same forward pass and
        returned (with the entropy) so the driver needs no separate old-log-prob pass."""
        cfg = self.cfg
        on_policy = "old_log_probs" not in batch.tensors
        if on_policy and (cfg.ppo_epochs != 1 or len(batch) > self.mini_batch):
            raise ValueError("on-policy update needs ppo_epochs=1 and one mini-batch; pass old_log_probs instead")
        keys = [k for k in UPDATE_INPUTS if not (on_policy and k == "old_log_probs")]
        keys += ["ref_log_prob"] if cfg.use_kl_loss else []
        keys += ["rollout_is_weights"] if "rollout_is_weights" in batch.tensors else []  # rollout correction
        data = batch.select(keys, meta_keys=())
        metrics: dict[str, list[float]] = {}
        produced: dict[str, list[torch.Tensor]] = {"old_log_probs": [], "entropys": []}

        def add(key, value):  # tensors stay on the device until the end: no sync per micro-batch
            metrics.setdefault(key, []).append(value.detach() if isinstance(value, torch.Tensor) else float(value))

        policy_loss = get_policy_loss(cfg.policy_loss.loss_mode)  # vanilla (PPO) or gspo
        self.module.train()
        generator = torch.Generator().manual_seed(int(batch.info.get("global_step", 0)))
        for _ in range(cfg.ppo_epochs):
            if cfg.shuffle and not on_policy:  # one mini-batch: order is irrelevant, keep rows aligned
                data = data.index(torch.randperm(len(data), generator=generator))
            width = data["responses"].shape[1]
            norm = cfg.loss_scale_factor or width  # seq-mean-token-sum-norm's divisor: width before trimming
            for mini in data.split(self.mini_batch):
                self.optimizer.zero_grad(set_to_none=True)
                mbs, order = micro_batches(mini, self.micro_batch, self.max_tokens, self.remove_padding)
                weights = micro_batch_weights([mb["response_mask"] for mb in mbs], mini["response_mask"],
                                              cfg.loss_agg_mode)
                mini_produced: dict[str, list[torch.Tensor]] = {"old_log_probs": [], "entropys": []}
                pg_loss = 0.0  # the mini-batch's loss: the micro-batches' losses by their weights
                for i in accumulate(self.module, len(mbs), self.world):
                    mb, weight = mbs[i], weights[i]
                    mask = mb["response_mask"].float()
                    log_prob, entropy = response_log_probs(self.module, mb, self.temperature,
                                                           calc_entropy=cfg.entropy_coeff != 0 or on_policy,
                                                           remove_padding=self.remove_padding)
                    old_log_prob = log_prob.detach() if on_policy else mb["old_log_probs"]
                    if on_policy:
                        mini_produced["old_log_probs"].append(pad_to(old_log_prob, width))
                        mini_produced["entropys"].append(pad_to(entropy.detach(), width))
                    pg = policy_loss(old_log_prob, log_prob, mb["advantages"], mask,
                                     clip_ratio_low=cfg.clip_ratio_low, clip_ratio_high=cfg.clip_ratio_high,
                                     clip_ratio_c=cfg.clip_ratio_c, loss_agg_mode=cfg.loss_agg_mode,
                                     norm_length=norm, rollout_is_weights=mb.tensors.get("rollout_is_weights"))
                    loss = pg["pg_loss"]
                    if cfg.entropy_coeff != 0:
                        entropy_loss = agg_loss(entropy, mask, cfg.loss_agg_mode, norm)
                        loss = loss - cfg.entropy_coeff * entropy_loss
                        add("actor/entropy_loss", entropy_loss)
                    if cfg.use_kl_loss:
                        kld = kl_penalty(log_prob, mb["ref_log_prob"], cfg.kl_loss_type)
                        kl_loss = agg_loss(kld, mask, cfg.loss_agg_mode, norm)
                        loss = loss + cfg.kl_loss_coef * kl_loss
                        add("actor/kl_loss", kl_loss)
                        add("actor/kl_coef", cfg.kl_loss_coef)
                    (loss * weight).backward()
                    pg_loss = pg_loss + pg["pg_loss"].detach() * weight
                    add("actor/pg_clipfrac", pg["pg_clipfrac"])
                    add("actor/ppo_kl", pg["ppo_kl"])
                    add("actor/pg_clipfrac_lower", pg["pg_clipfrac_lower"])
                if on_policy:
                    for k, parts in mini_produced.items():
                        produced[k].append(unpermute(torch.cat(parts), order))
                add("actor/pg_loss", pg_loss)  # x world size / mean over workers = the mini-batch's loss
                grad_norm = clip_grad_norm(self.module, cfg.grad_clip)
                finite = bool(torch.isfinite(grad_norm))
                if finite:
                    self.optimizer.step()
                # a non-finite gradient would poison the weights: the mini-batch is skipped, and the metric (in
                # every step, 0 or 1) lets the console and the run page say so
                add("actor/grad_norm_nonfinite", 0.0 if finite else 1.0)
                self.optimizer.zero_grad(set_to_none=True)
                add("actor/grad_norm", grad_norm)
        add("actor/lr", self.scheduler.get_last_lr()[0])
        self.scheduler.step()
        metrics = to_floats(metrics)
        out = Batch({k: torch.cat(v) for k, v in produced.items()}) if on_policy else Batch()
        return metrics, out

