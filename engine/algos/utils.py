"""Masked reductions over padded [B, R] tensors.

A mask is 1 (or a positive weight) for entries that count and 0 for padding; bool masks are accepted.
Behaviour at the edges, chosen so that padding never produces NaN:

* entries where the mask is 0 are dropped with `torch.where`, so NaN/inf hiding in padding cannot leak
  through `0 * nan`;
* a mean over an empty selection (mask sum 0) is 0;
* an unbiased variance needs a mask sum above 1; at or below 1 the biased estimate is returned
  (which is 0 for a single entry and for an empty selection);
* `masked_whiten` returns 0 at masked-out entries.
"""

from __future__ import annotations

import torch


def _float_mask(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Values and mask broadcast to one shape, mask in the values' floating dtype."""
    dtype = values.dtype if values.is_floating_point() else torch.get_default_dtype()
    values, mask = torch.broadcast_tensors(values.to(dtype), mask.to(device=values.device, dtype=dtype))
    return values, mask


def _reduce_sum(x: torch.Tensor, dim, keepdim: bool) -> torch.Tensor:
    if dim is None:
        total = x.sum()
        return total.reshape([1] * x.dim()) if keepdim else total
    return x.sum(dim=dim, keepdim=keepdim)


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim=None, keepdim: bool = False) -> torch.Tensor:
    """Sum of values * mask over `dim` (all dims when None)."""
    values, mask = _float_mask(values, mask)
    weighted = torch.where(mask != 0, values * mask, torch.zeros_like(values))
    return _reduce_sum(weighted, dim, keepdim)


def masked_count(values: torch.Tensor, mask: torch.Tensor, dim=None, keepdim: bool = False) -> torch.Tensor:
    """Sum of the mask (the weight of the selection) over `dim`, broadcast against values first."""
    _, mask = _float_mask(values, mask)
    return _reduce_sum(mask, dim, keepdim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim=None, keepdim: bool = False) -> torch.Tensor:
    """Weighted mean over `dim`; 0 where the mask sums to 0."""
    total = masked_sum(values, mask, dim, keepdim)
    count = masked_count(values, mask, dim, keepdim)
    safe_count = torch.where(count > 0, count, torch.ones_like(count))
    return torch.where(count > 0, total / safe_count, torch.zeros_like(total))


def masked_var(
    values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True, dim=None, keepdim: bool = False
) -> torch.Tensor:
    """Weighted variance over `dim`.

    unbiased applies Bessel's correction n / (n - 1) with n the mask sum; when n <= 1 the correction is
    undefined and the biased value is returned instead of raising or producing inf.
    """
    mean = masked_mean(values, mask, dim, keepdim=True)
    var = masked_mean((values - mean) ** 2, mask, dim, keepdim)
    if unbiased:
        count = masked_count(values, mask, dim, keepdim)
        safe_denominator = torch.where(count > 1, count - 1, torch.ones_like(count))
        var = torch.where(count > 1, var * count / safe_denominator, var)
    return var


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """(values - mean) / sqrt(var + eps) with mean and unbiased var taken over all selected entries.

    shift_mean=False adds the mean back (rescale only). Masked-out entries come back as 0.
    """
    values, mask = _float_mask(values, mask)
    mean = masked_mean(values, mask)
    var = masked_var(values, mask, unbiased=True)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask != 0, whitened, torch.zeros_like(whitened))
