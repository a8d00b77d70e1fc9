"""Optimizer and learning-rate schedule of a trained role (actor or critic)."""
from __future__ import annotations

import math

import torch


def build_optimizer(params, optim_cfg, device: str) -> torch.optim.Optimizer:
    kwargs = dict(lr=optim_cfg.lr, betas=tuple(optim_cfg.betas), weight_decay=optim_cfg.weight_decay)
    if device == "cuda":
        kwargs["fused"] = True  # one kernel for the whole update on GPU
    return torch.optim.AdamW(params, **kwargs)


def lr_lambda(optim_cfg, total_steps: int):
    """Multiplier of the base lr at a step: linear warmup, then constant / cosine / linear decay."""
    total = optim_cfg.total_training_steps if optim_cfg.total_training_steps > 0 else total_steps
    warmup = optim_cfg.lr_warmup_steps if optim_cfg.lr_warmup_steps > 0 else \
        int(optim_cfg.lr_warmup_steps_ratio * total)
    min_ratio = optim_cfg.min_lr_ratio or 0.0
    style = optim_cfg.warmup_style

    def fn(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        if style == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if style == "cosine":
            decay = 0.5 * (1.0 + math.cos(math.pi * 2.0 * optim_cfg.num_cycles * progress))
        else:
            decay = 1.0 - progress
        return min_ratio + (1.0 - min_ratio) * decay

    return fn


def build_scheduler(optimizer, optim_cfg, total_steps: int):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(optim_cfg, total_steps))
