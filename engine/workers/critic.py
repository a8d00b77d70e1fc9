"""Critic: a value head on an LM backbone with its own weights; predicts values and is regressed on returns."""
from __future__ import annotations

import torch

from engine.algos.losses import compute_value_loss
from engine.algos.utils import masked_mean
from engine.protocol import Batch
from engine.workers.forward import MODEL_INPUTS, batched_values, micro_batches, response_values
from engine.workers.fsdp import accumulate, clip_grad_norm, to_floats
from engine.workers.loss_weights import micro_batch_weights

UPDATE_INPUTS = MODEL_INPUTS + ("responses", "response_mask", "values", "returns")


class Critic:
    def __init__(self, module, optimizer, scheduler, critic_cfg, *, rollout_n: int, world: int):
        self.module, self.optimizer, self.scheduler = module, optimizer, scheduler
        self.cfg = critic_cfg
        self.mini_batch = critic_cfg.ppo_mini_batch_size * rollout_n // world
        self.micro_batch = critic_cfg.ppo_micro_batch_size_per_gpu
        self.world = world
        self.remove_padding = critic_cfg.model.use_remove_padding  # packed micro-batches

    def compute_values(self, batch: Batch) -> torch.Tensor:
        self.module.eval()
        max_tokens = self.cfg.forward_max_token_len_per_gpu if self.cfg.use_dynamic_bsz else None
        return batched_values(self.module, batch, self.cfg.forward_micro_batch_size_per_gpu, max_tokens,
                              self.remove_padding)

    def update_critic(self, batch: Batch) -> dict[str, list[float]]:
        cfg = self.cfg
        data = batch.select(UPDATE_INPUTS, meta_keys=())
        metrics: dict[str, list[float]] = {}

        def add(key, value):  # tensors stay on the device until the end: no sync per micro-batch
            metrics.setdefault(key, []).append(value.detach() if isinstance(value, torch.Tensor) else float(value))

        self.module.train()
        generator = torch.Generator().manual_seed(int(batch.info.get("global_step", 0)))
        for _ in range(cfg.ppo_epochs):
            if cfg.shuffle:  # which rows share a mini-batch (verl: critic.shuffle, default: the actor's)
                data = data.index(torch.randperm(len(data), generator=generator))
            for mini in data.split(self.mini_batch):
                self.optimizer.zero_grad(set_to_none=True)
                max_tokens = cfg.ppo_max_token_len_per_gpu if cfg.use_dynamic_bsz else None
                # the loss needs no row order
                mbs = micro_batches(mini, self.micro_batch, max_tokens, self.remove_padding)[0]
                weights = micro_batch_weights([mb["response_mask"] for mb in mbs], mini["response_mask"],
                                              cfg.loss_agg_mode)
                vf_total = 0.0
                for i in accumulate(self.module, len(mbs), self.world):
                    mb, weight = mbs[i], weights[i]
                    mask = mb["response_mask"].float()
                    vpreds = response_values(self.module, mb, self.remove_padding)
                    vf_loss, vf_clipfrac = compute_value_loss(vpreds, mb["returns"], mb["values"], mask,
                                                              cliprange_value=cfg.cliprange_value,
                                                              loss_agg_mode=cfg.loss_agg_mode,
                                                              norm_length=cfg.loss_scale_factor
                                                              or mini["responses"].shape[1])
                    (vf_loss * weight).backward()
                    vf_total = vf_total + vf_loss.detach() * weight
                    add("critic/vf_clipfrac", vf_clipfrac)
                    add("critic/vpred_mean", masked_mean(vpreds.detach(), mask))
                add("critic/vf_loss", vf_total)  # x world size / mean over workers = the mini-batch's loss
                grad_norm = clip_grad_norm(self.module, cfg.grad_clip)
                finite = bool(torch.isfinite(grad_norm))
                if finite:
                    self.optimizer.step()
                add("critic/grad_norm_nonfinite", 0.0 if finite else 1.0)  # 1: this mini-batch was skipped
                self.optimizer.zero_grad(set_to_none=True)
                add("critic/grad_norm", grad_norm)
        add("critic/lr", self.scheduler.get_last_lr()[0])
        self.scheduler.step()
        return to_floats(metrics)

