"""Masked reductions, checked against hand-computed numbers."""

import math

import pytest
import torch

from engine.algos.utils import masked_mean, masked_sum, masked_var, masked_whiten

VALUES = torch.tensor([[2.0, 4.0, 6.0, 100.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the 100 is padding


def test_masked_sum_and_mean_ignore_padding():
    assert masked_sum(VALUES, MASK).item() == 12.0  # 2 + 4 + 6
    assert masked_mean(VALUES, MASK).item() == 4.0  # 12 / 3


def test_masked_mean_along_dim():
    values = torch.tensor([[1.0, 3.0, 5.0], [10.0, 20.0, 30.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    # row 0: (1 + 3) / 2 = 2; row 1: 10 / 1 = 10
    torch.testing.assert_close(masked_mean(values, mask, dim=-1), torch.tensor([2.0, 10.0]))


def test_empty_mask_gives_zero_not_nan():
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    assert masked_mean(values, torch.zeros_like(values)).item() == 0.0
    torch.testing.assert_close(masked_mean(values, mask, dim=-1), torch.tensor([1.5, 0.0]))
    assert masked_var(values, torch.zeros_like(values)).item() == 0.0


def test_nonfinite_padding_does_not_leak():
    values = torch.tensor([1.0, 3.0, math.inf, math.nan])
    mask = torch.tensor([1.0, 1.0, 0.0, 0.0])
    assert masked_mean(values, mask).item() == 2.0
    assert masked_var(values, mask).item() == 2.0  # ((1-2)^2 + (3-2)^2) / (2 - 1)


def test_masked_var_biased_and_unbiased():
    # mean 4, squared deviations 4, 0, 4 -> sum 8
    assert masked_var(VALUES, MASK, unbiased=True).item() == pytest.approx(8 / 2)
    assert masked_var(VALUES, MASK, unbiased=False).item() == pytest.approx(8 / 3)


def test_masked_var_single_entry_is_zero():
    assert masked_var(VALUES, torch.tensor([[0.0, 1.0, 0.0, 0.0]])).item() == 0.0


def test_masked_whiten():
    # mean 4, unbiased std 2 -> (2, 4, 6) -> (-1, 0, 1); padding -> 0
    torch.testing.assert_close(masked_whiten(VALUES, MASK), torch.tensor([[-1.0, 0.0, 1.0, 0.0]]))
    # shift_mean=False adds the mean back: (3, 4, 5)
    torch.testing.assert_close(masked_whiten(VALUES, MASK, shift_mean=False), torch.tensor([[3.0, 4.0, 5.0, 0.0]]))
