"""How much each micro-batch's loss counts, so that a mini-batch's gradient does not depend on how it was cut
into micro-batches or split over data-parallel workers.

A micro-batch's loss is aggregated over its own rows/tokens; its backward is then scaled by its share of the
whole mini-batch. For `token-mean` the share is its valid tokens over the mini-batch's valid tokens on all
workers (an all-reduce), times the world size because FSDP averages gradients over workers. (verl's original
`len(micro) / len(mini)` weights a token in a short micro-batch more than one in a long micro-batch, so the
gradient changed with the micro-batch size and the number of GPUs.) The seq-mean modes (seq-mean-token-sum-norm
included: a mean over rows divided by a constant) already count rows, and rows are split evenly, so their share
stays rows over rows. token-sum adds up every micro-batch's sum: each counts fully, times the world size.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def _world() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def global_token_count(response_mask: torch.Tensor) -> torch.Tensor:
    """Valid response tokens of this mini-batch summed over all data-parallel workers (collective)."""
    count = response_mask.sum().to(torch.float32)
    if _world() > 1:
        dist.all_reduce(count)
    return count


def micro_batch_weights(micro_masks: list[torch.Tensor], mini_response_mask: torch.Tensor,
                        loss_agg_mode: str) -> list[torch.Tensor | float]:
    """The factor each micro-batch's aggregated loss is multiplied by before backward (one per micro-batch;
    collective for token-mean: every worker must call it for every mini-batch)."""
    rows = len(mini_response_mask)
    if loss_agg_mode == "token-sum":
        return [float(_world()) for _ in micro_masks]
    if loss_agg_mode != "token-mean":
        return [len(m) / rows for m in micro_masks]
    total = global_token_count(mini_response_mask).clamp(min=1.0)
    return [m.sum().to(torch.float32) * _world() / total for m in micro_masks]
