"""Reference: the frozen starting policy. Log-probs of the rollouts under its weights feed the KL penalty (in the
reward or in the actor's loss); it is never updated."""
from __future__ import annotations

import contextlib

import torch

from engine.adapters import lora
from engine.protocol import Batch
from engine.workers.forward import batched_log_probs


class Reference:
    def __init__(self, module, ref_cfg, *, temperature: float, remove_padding: bool = False, adapter_off: bool = False):
        self.module, self.cfg = module, ref_cfg
        self.adapter_off = adapter_off  # a LoRA actor's module, run as its base model
        self.temperature = temperature  # the rollout's: the same scaled distribution the actor's log-probs use
        self.remove_padding = remove_padding  # follows the actor's model (use_remove_padding)

    def compute_log_prob(self, batch: Batch) -> torch.Tensor:
        """`ref_log_prob` of the response tokens, micro-batch by micro-batch (by tokens: log_prob_use_dynamic_bsz)."""
        cfg = self.cfg
        self.module.eval()
        max_tokens = cfg.log_prob_max_token_len_per_gpu if cfg.log_prob_use_dynamic_bsz else None
        with lora.adapter_off(self.module) if self.adapter_off else contextlib.nullcontext():
            log_probs, _ = batched_log_probs(self.module, batch, cfg.log_prob_micro_batch_size_per_gpu,
                                             self.temperature, max_tokens=max_tokens,
                                             remove_padding=self.remove_padding)
        return log_probs
