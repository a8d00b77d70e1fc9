"""Critic: a value head on an LM backbone with its own weights; predicts values and is regressed on returns."""
from __future__ import annotations

import torch

from engine.algos.losses import compute_value_loss
from engine.algos.utils import masked_mean
from engine.protocol import Batch
from engine.workers.forward import MODEL_INPUTS, batched_values, response_values
from engine.workers.update import Metrics, UpdatedModel

UPDATE_INPUTS = MODEL_INPUTS + ("responses", "response_mask", "values", "returns")


class Critic(UpdatedModel):
    prefix = "critic"

    def __init__(self, module, optimizer, scheduler, critic_cfg, *, rollout_n: int, world: int):
        super().__init__(module, optimizer, scheduler, critic_cfg,
                         mini_batch=critic_cfg.ppo_mini_batch_size * rollout_n // world,
                         world=world, remove_padding=critic_cfg.model.use_remove_padding)

    def compute_values(self, batch: Batch) -> torch.Tensor:
        self.module.eval()
        max_tokens = self.cfg.forward_max_token_len_per_gpu if self.cfg.use_dynamic_bsz else None
        return batched_values(self.module, batch, self.cfg.forward_micro_batch_size_per_gpu, max_tokens,
                              self.remove_padding)

    def update_critic(self, batch: Batch) -> dict[str, list[float]]:
        cfg = self.cfg

        def micro_loss(mb: Batch, norm: int, metrics: Metrics):
            mask = mb["response_mask"].float()
            vpreds = response_values(self.module, mb, self.remove_padding)
            vf_loss, vf_clipfrac = compute_value_loss(vpreds, mb["returns"], mb["values"], mask,
                                                      cliprange_value=cfg.cliprange_value,
                                                      loss_agg_mode=cfg.loss_agg_mode, norm_length=norm)
            metrics.add("critic/vf_clipfrac", vf_clipfrac)
            metrics.add("critic/vpred_mean", masked_mean(vpreds.detach(), mask))
            return vf_loss, vf_loss, None

        # shuffle: which rows share a mini-batch (verl: critic.shuffle, default: the actor's)
        metrics, _ = self.run_update(batch.select(UPDATE_INPUTS, meta_keys=()), micro_loss, loss_key="critic/vf_loss",
                                     shuffle=cfg.shuffle, seed=int(batch.info.get("global_step", 0)))
        return metrics
