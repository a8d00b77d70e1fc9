"""The update loop the actor and the critic share: epochs × mini-batches (one optimizer step each) ×
micro-batches (gradients accumulated with weights that make the loss independent of how the mini-batch is
split over workers and micro-batches, engine/workers/loss_weights.py). The role supplies the loss of one
micro-batch; everything else (shuffling, the optimizer step, skipping a non-finite gradient, the metrics
every update reports) is here once."""
from __future__ import annotations

from collections.abc import Callable

import torch

from engine.distributed.fsdp import accumulate, clip_grad_norm, to_floats
from engine.protocol import Batch
from engine.workers.forward import micro_batches, pad_to, unpermute
from engine.workers.loss_weights import micro_batch_weights


class Metrics(dict):
    """Metric name -> values, one per micro- or mini-batch; tensors stay on the device until `floats()`, so
    recording one costs no device sync. `optimizer_steps`: the steps taken so far in this update (a role's loss may
    do something before the first one: exact mode's check)."""

    optimizer_steps = 0

    def add(self, key: str, value) -> None:
        self.setdefault(key, []).append(value.detach() if isinstance(value, torch.Tensor) else float(value))

    def floats(self) -> dict[str, list[float]]:
        return to_floats(dict(self))


# loss of one micro-batch: (mb, norm_length, metrics) -> (loss to backpropagate, the part reported as the
# role's loss, per-row outputs to hand back to the driver or None)
MicroLoss = Callable[[Batch, int, Metrics], tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor] | None]]


class UpdatedModel:
    """An FSDP module with its optimizer and lr schedule, trained by PPO-style mini-batch updates.

    `cfg` is the role's config section (ppo_epochs, grad_clip, loss_agg_mode, loss_scale_factor, micro-batch
    sizes); `mini_batch` is in sequences per worker."""

    prefix = ""  # metric prefix: "actor" or "critic"

    def __init__(self, module, optimizer, scheduler, cfg, *, mini_batch: int, world: int, remove_padding: bool):
        self.module, self.optimizer, self.scheduler = module, optimizer, scheduler
        self.cfg = cfg
        self.mini_batch = mini_batch
        self.world = world
        self.remove_padding = remove_padding  # packed micro-batches (use_remove_padding)

    # read from the config at each update: trainer.auto_micro_batch sets them after the model is built
    @property
    def micro_batch(self) -> int:
        return self.cfg.ppo_micro_batch_size_per_gpu

    @property
    def max_tokens(self) -> int | None:
        """use_dynamic_bsz: micro-batches by a token budget instead of a row count."""
        return self.cfg.ppo_max_token_len_per_gpu if self.cfg.use_dynamic_bsz else None

    def run_update(self, data: Batch, micro_loss: MicroLoss, *, loss_key: str, shuffle: bool,
                   seed: int) -> tuple[dict[str, list[float]], Batch]:
        """cfg.ppo_epochs passes over `data` in mini-batches; returns the metrics and the rows' outputs that
        `micro_loss` handed back (in `data`'s order; an empty Batch when it handed none)."""
        cfg = self.cfg
        metrics = Metrics()
        produced: dict[str, list[torch.Tensor]] = {}
        self.module.train()
        generator = torch.Generator().manual_seed(seed)
        for _ in range(cfg.ppo_epochs):
            if shuffle:  # which rows share a mini-batch
                data = data.index(torch.randperm(len(data), generator=generator))
            width = data["responses"].shape[1]
            norm = cfg.loss_scale_factor or width  # seq-mean-token-sum-norm's divisor: width before trimming
            for mini in data.split(self.mini_batch):
                self.optimizer.zero_grad(set_to_none=True)
                mbs, order = micro_batches(mini, self.micro_batch, self.max_tokens, self.remove_padding)
                weights = micro_batch_weights([mb["response_mask"] for mb in mbs], mini["response_mask"],
                                              cfg.loss_agg_mode)
                mini_produced: dict[str, list[torch.Tensor]] = {}
                reported = 0.0  # the mini-batch's loss: the micro-batches' losses by their weights
                for i in accumulate(self.module, len(mbs), self.world):
                    loss, part, outputs = micro_loss(mbs[i], norm, metrics)
                    (loss * weights[i]).backward()
                    reported = reported + part.detach() * weights[i]
                    for k, v in (outputs or {}).items():
                        mini_produced.setdefault(k, []).append(pad_to(v.detach(), width))
                for k, parts in mini_produced.items():
                    produced.setdefault(k, []).append(unpermute(torch.cat(parts), order))
                metrics.add(loss_key, reported)  # x world size / mean over workers = the mini-batch's loss
                grad_norm = clip_grad_norm(self.module, cfg.grad_clip)
                finite = bool(torch.isfinite(grad_norm))
                if finite:
                    self.optimizer.step()
                metrics.optimizer_steps += 1
                # a non-finite gradient would poison the weights: the mini-batch is skipped, and the metric (in
                # every step, 0 or 1) lets the console and the run page say so
                metrics.add(f"{self.prefix}/grad_norm_nonfinite", 0.0 if finite else 1.0)
                self.optimizer.zero_grad(set_to_none=True)
                metrics.add(f"{self.prefix}/grad_norm", grad_norm)
        metrics.add(f"{self.prefix}/lr", self.scheduler.get_last_lr()[0])
        self.scheduler.step()
        return metrics.floats(), Batch({k: torch.cat(v) for k, v in produced.items()})
