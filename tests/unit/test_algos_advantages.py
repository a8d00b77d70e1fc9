"""Advantage estimators against hand-computed numbers."""

import math

import numpy as np
import pytest
import torch

from engine.algos.advantages import (
    ADV_ESTIMATORS,
    compute_advantage,
    compute_group_stats,
    get_adv_estimator,
    register_adv_estimator,
)
from engine.config.vocab import AdvEstimator, names

SQRT21 = math.sqrt(21.0)
SQRT7 = math.sqrt(7.0)


def _outcome_rewards(scores, lengths, width):
    """Token rewards with each score on the row's last valid token, plus the response mask."""
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for row, (score, length) in enumerate(zip(scores, lengths)):
        rewards[row, length - 1] = score
        mask[row, :length] = 1.0
    return rewards, mask


# ---- GAE -------------------------------------------------------------------------------------------

REWARDS_1x3 = torch.tensor([[0.0, 0.0, 1.0]])
VALUES_1x3 = torch.tensor([[0.5, 0.4, 0.2]])
MASK_1x3 = torch.ones(1, 3)


def test_gae_gamma1_lam1():
    # gamma = lam = 1: A_t = (sum of rewards from t) - V_t = (1 - 0.5, 1 - 0.4, 1 - 0.2) = (0.5, 0.6, 0.8)
    # returns = A + V = (1, 1, 1)
    # whiten: mean 19/30, deviations (-4, -1, 5)/30, unbiased var (16 + 1 + 25)/900/2 = 21/900
    #   -> (-4, -1, 5) / sqrt(21)
    adv, ret = compute_advantage(
        "gae", token_level_rewards=REWARDS_1x3, response_mask=MASK_1x3, values=VALUES_1x3, gamma=1.0, lam=1.0
    )
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0]]))
    torch.testing.assert_close(adv, torch.tensor([[-4.0, -1.0, 5.0]]) / SQRT21)


def test_gae_gamma_half_lam_half():
    # t=2: delta = 1 + 0.5*0 - 0.2 = 0.8;    A2 = 0.8
    # t=1: delta = 0 + 0.5*0.2 - 0.4 = -0.3; A1 = -0.3 + 0.25*0.8 = -0.1
    # t=0: delta = 0 + 0.5*0.4 - 0.5 = -0.3; A0 = -0.3 + 0.25*(-0.1) = -0.325
    # returns = A + V = (0.175, 0.3, 1.0)
    # whiten: mean 0.125, deviations 0.225 * (-2, -1, 3), var 0.225^2 * 14 / 2 -> (-2, -1, 3) / sqrt(7)
    adv, ret = compute_advantage(
        "gae", token_level_rewards=REWARDS_1x3, response_mask=MASK_1x3, values=VALUES_1x3, gamma=0.5, lam=0.5
    )
    torch.testing.assert_close(ret, torch.tensor([[0.175, 0.3, 1.0]]))
    torch.testing.assert_close(adv, torch.tensor([[-2.0, -1.0, 3.0]]) / SQRT7)


def test_gae_padding_does_not_leak():
    # Same row as above plus one padded step holding a large reward and value: it must change nothing.
    rewards = torch.tensor([[0.0, 0.0, 1.0, 5.0]])
    values = torch.tensor([[0.5, 0.4, 0.2, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    adv, ret = compute_advantage(
        "gae", token_level_rewards=rewards, response_mask=mask, values=values, gamma=0.5, lam=0.5
    )
    torch.testing.assert_close(ret, torch.tensor([[0.175, 0.3, 1.0, 0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[-2.0, -1.0, 3.0, 0.0]]) / SQRT7)


def test_gae_needs_values():
    with pytest.raises(ValueError, match="values"):
        compute_advantage("gae", token_level_rewards=REWARDS_1x3, response_mask=MASK_1x3)


# ---- group statistics and GRPO ---------------------------------------------------------------------

# group "a": scores (1, 0, 0); group "b": a single sample 0.7; group "c": degenerate (1, 1)
GROUP_SCORES = [1.0, 0.0, 0.0, 0.7, 1.0, 1.0]
GROUP_LENGTHS = [2, 3, 1, 2, 3, 1]
GROUP_INDEX = np.array(["a", "a", "a", "b", "c", "c"], dtype=object)
# group a: mean 1/3, deviations (2/3, -1/3, -1/3), unbiased var (4 + 1 + 1)/9 / 2 = 1/3, std 1/sqrt(3)
STD_A = 1.0 / math.sqrt(3.0)


def test_group_stats():
    stats = compute_group_stats(torch.tensor(GROUP_SCORES), GROUP_INDEX)
    torch.testing.assert_close(stats.mean, torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0, 1.0, 1.0]))
    torch.testing.assert_close(stats.std, torch.tensor([STD_A, STD_A, STD_A, 1.0, 0.0, 0.0]))
    assert stats.size.tolist() == [3, 3, 3, 1, 2, 2]
    assert stats.degenerate.tolist() == [False, False, False, False, True, True]
    assert (stats.num_groups, stats.num_degenerate) == (3, 1)


def test_grpo_normalised():
    rewards, mask = _outcome_rewards(GROUP_SCORES, GROUP_LENGTHS, width=3)
    adv, ret = compute_advantage("grpo", token_level_rewards=rewards, response_mask=mask, index=GROUP_INDEX)
    # a: (2/3, -1/3, -1/3) / (1/sqrt 3) = (2, -1, -1)/sqrt(3); b: 0.7 / (1 + 1e-6); c: 0 exactly
    per_row = torch.tensor([2 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3), 0.7, 0.0, 0.0])
    torch.testing.assert_close(adv, per_row[:, None] * mask, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, adv)
    assert (adv[4:] == 0).all()  # degenerate group: exactly zero, not float noise / epsilon


def test_grpo_without_std():
    rewards, mask = _outcome_rewards(GROUP_SCORES, GROUP_LENGTHS, width=3)
    adv, _ = compute_advantage(
        "grpo", token_level_rewards=rewards, response_mask=mask, index=list(GROUP_INDEX), norm_adv_by_std_in_grpo=False
    )
    per_row = torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.7, 0.0, 0.0])
    torch.testing.assert_close(adv, per_row[:, None] * mask)


def test_grpo_degenerate_with_inexact_floats_is_exactly_zero():
    # 0.9 is not representable: in fp32, torch.tensor([0.9] * 3).mean() is off by an ulp and the naive
    # (score - mean) / (std + 1e-6) comes out near 0.056 instead of 0.
    rewards, mask = _outcome_rewards([0.9, 0.9, 0.9], [1, 2, 3], width=3)
    adv, _ = compute_advantage("grpo", token_level_rewards=rewards, response_mask=mask, index=[7, 7, 7])
    assert (adv == 0).all()


def test_grpo_needs_index_of_matching_length():
    rewards, mask = _outcome_rewards([1.0, 0.0], [1, 1], width=1)
    with pytest.raises(ValueError, match="index"):
        compute_advantage("grpo", token_level_rewards=rewards, response_mask=mask)
    with pytest.raises(ValueError, match="3 entries"):
        compute_advantage("grpo", token_level_rewards=rewards, response_mask=mask, index=[0, 0, 1])


# ---- RLOO, REINFORCE++, ReMax ----------------------------------------------------------------------


def test_rloo():
    scores = [1.0, 0.0, 0.0, 0.7, 3.0, 1.0, 2.0, 2.0]
    index = ["a", "a", "a", "b", "d", "d", "c", "c"]
    rewards, mask = _outcome_rewards(scores, [3, 2, 1, 3, 2, 1, 3, 3], width=3)
    adv, ret = compute_advantage("rloo", token_level_rewards=rewards, response_mask=mask, index=index)
    # a: 1 - mean(0, 0) = 1; 0 - mean(1, 0) = -0.5 (twice); b (size 1): 0.7
    # d: 3 - 1 = 2, 1 - 3 = -2; c (degenerate): 0, 0
    per_row = torch.tensor([1.0, -0.5, -0.5, 0.7, 2.0, -2.0, 0.0, 0.0])
    torch.testing.assert_close(adv, per_row[:, None] * mask)
    torch.testing.assert_close(ret, adv)


def test_reinforce_plus_plus():
    rewards = torch.tensor([[0.0, 0.0, 1.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    adv, ret = compute_advantage("reinforce_plus_plus", token_level_rewards=rewards, response_mask=mask, gamma=0.5)
    # return-to-go with gamma 0.5 from the last valid token: (0.25, 0.5, 1); the padded 7 is dropped
    torch.testing.assert_close(ret, torch.tensor([[0.25, 0.5, 1.0, 0.0]]))
    # whiten: mean 7/12, deviations (-4, -1, 5)/12 -> (-4, -1, 5) / sqrt(21)
    torch.testing.assert_close(adv, torch.tensor([[-4.0, -1.0, 5.0, 0.0]]) / SQRT21)


def test_reinforce_plus_plus_baseline():
    rewards, mask = _outcome_rewards([1.0, 0.0, 0.5], [2, 1, 1], width=2)
    adv, ret = compute_advantage(
        "reinforce_plus_plus_baseline", token_level_rewards=rewards, response_mask=mask, index=["a", "a", "b"]
    )
    # score - group mean: a -> (0.5, -0.5), b (size 1, mean 0) -> 0.5
    # valid tokens (0.5, 0.5 | -0.5 | 0.5): mean 0.25, deviations (.25, .25, -.75, .25), var 0.75/3 = 0.25
    # -> whitened (0.5, 0.5 | -1.5 | 0.5)
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.5], [-1.5, 0.0], [0.5, 0.0]]))
    torch.testing.assert_close(ret, adv)


def test_remax():
    rewards = torch.tensor([[0.0, 1.0, 2.0], [1.0, 2.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    baselines = torch.tensor([2.5, 1.0])
    adv, ret = compute_advantage("remax", token_level_rewards=rewards, response_mask=mask, reward_baselines=baselines)
    # reverse cumsum over valid tokens: (3, 3, 2) and (3, 2, padding 0)
    torch.testing.assert_close(ret, torch.tensor([[3.0, 3.0, 2.0], [3.0, 2.0, 0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.5, -0.5], [2.0, 1.0, 0.0]]))
    with pytest.raises(ValueError, match="reward_baselines"):
        compute_advantage("remax", token_level_rewards=rewards, response_mask=mask)


# ---- registry --------------------------------------------------------------------------------------


def test_registry_contents_and_unknown_name():
    assert set(names(AdvEstimator)) <= set(ADV_ESTIMATORS)  # the vocabulary is declared once (test_vocab.py)
    with pytest.raises(ValueError, match="grpo") as err:
        get_adv_estimator("nope")
    assert "nope" in str(err.value) and "remax" in str(err.value)


def test_dispatcher_passes_only_what_an_estimator_names():
    seen = {}

    @register_adv_estimator("_test_sum_only")
    def _estimator(*, token_level_rewards, response_mask, gamma):
        seen.update(gamma=gamma)
        return token_level_rewards * response_mask, token_level_rewards

    try:
        adv, _ = compute_advantage(
            "_test_sum_only", token_level_rewards=REWARDS_1x3, response_mask=MASK_1x3, gamma=0.9, index=[0]
        )
        assert seen == {"gamma": 0.9}
        torch.testing.assert_close(adv, REWARDS_1x3)
        with pytest.raises(ValueError, match="already registered"):
            register_adv_estimator("_test_sum_only")(lambda **kw: None)
    finally:
        ADV_ESTIMATORS.pop("_test_sum_only", None)
