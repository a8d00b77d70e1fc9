"""Loss aggregation, PPO policy loss (dual clip), value loss: hand-computed numbers."""

import math

import pytest
import torch

from engine.algos.losses import (
    POLICY_LOSSES,
    agg_loss,
    compute_policy_loss,
    compute_value_loss,
    get_policy_loss,
)

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
LOSS_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 2.5),  # (1 + 2 + 3 + 4) / 4 tokens
        ("seq-mean-token-sum", 5.0),  # row sums (6, 4) -> mean 5
        ("seq-mean-token-mean", 3.0),  # row means (2, 4) -> mean 3
        ("token-sum", 10.0),  # 1 + 2 + 3 + 4
        ("seq-mean-token-sum-norm", 5.0 / 3.0),  # row sums (6, 4) -> mean 5, / R with R = 3 columns
    ],
)
def test_agg_modes(mode, expected):
    assert agg_loss(LOSS, LOSS_MASK, mode).item() == pytest.approx(expected)
    assert agg_loss(LOSS, LOSS_MASK.bool(), mode).item() == pytest.approx(expected)  # a boolean mask works too


def test_seq_modes_skip_rows_without_tokens():
    loss = torch.cat([LOSS, torch.tensor([[50.0, 50.0, 50.0]])])
    mask = torch.cat([LOSS_MASK, torch.zeros(1, 3)])
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(5.0)
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.0)
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(5.0 / 3.0)
    assert agg_loss(loss, torch.zeros_like(loss), "token-mean").item() == 0.0


def test_unknown_agg_mode():
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
        agg_loss(LOSS, LOSS_MASK, "mean")


# Tokens (clip 0.2 / 0.2, dual clip c = 3), old_log_prob = 0 so ratio = exp(log_prob):
#   A=+1, r=1.5: l1=-1.5, l2=-1.2 -> max -1.2, ratio clip active
#   A=+1, r=0.5: l1=-0.5, l2=-0.8 -> max -0.5
#   A=-1, r=0.5: l1= 0.5, l2= 0.8 -> max  0.8, ratio clip active; min(0.8, 3) = 0.8
#   A=-1, r=4.0: l1= 4.0, l2= 1.2 -> max  4.0; dual clip: min(4, 3) = 3, lower clip active
#   padding:     A=100, r=10 (ignored)
RATIOS = torch.tensor([[1.5, 0.5, 0.5, 4.0, 10.0]])
ADVANTAGES = torch.tensor([[1.0, 1.0, -1.0, -1.0, 100.0]])
PG_MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])


def test_vanilla_policy_loss_with_dual_clip():
    log_prob = torch.log(RATIOS).requires_grad_(True)
    out = compute_policy_loss(torch.zeros_like(log_prob), log_prob, ADVANTAGES, PG_MASK)
    assert out["pg_loss"].item() == pytest.approx((-1.2 - 0.5 + 0.8 + 3.0) / 4)  # 0.525
    assert out["pg_clipfrac"].item() == pytest.approx(2 / 4)
    assert out["pg_clipfrac_lower"].item() == pytest.approx(1 / 4)
    # ppo_kl = mean(old - new) = -ln(1.5 * 0.5 * 0.5 * 4) / 4 = -ln(1.5) / 4
    assert out["ppo_kl"].item() == pytest.approx(-math.log(1.5) / 4)
    out["pg_loss"].backward()
    # Only the unclipped token 2 carries gradient: d(-A r)/d log r = -A r = -0.5, over 4 tokens
    torch.testing.assert_close(log_prob.grad, torch.tensor([[0.0, -0.125, 0.0, 0.0, 0.0]]))


def test_policy_loss_asymmetric_clip_and_agg_mode():
    log_prob = torch.log(RATIOS)
    out = compute_policy_loss(
        torch.zeros_like(log_prob),
        log_prob,
        ADVANTAGES,
        PG_MASK,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        loss_agg_mode="seq-mean-token-sum",
    )
    # token 1 now clips at 1.28: max(-1.5, -1.28) = -1.28; sum = -1.28 - 0.5 + 0.8 + 3 = 2.02 (one row)
    assert out["pg_loss"].item() == pytest.approx(2.02)


def test_policy_loss_extreme_log_ratio_is_finite():
    log_prob = torch.tensor([[50.0, 50.0]], requires_grad=True)
    old = torch.zeros(1, 2)
    out = compute_policy_loss(old, log_prob, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2))
    # A=+1: max(-e^20, -1.2) = -1.2; A=-1: max(e^20, 1.2) capped by the dual clip at 3
    assert out["pg_loss"].item() == pytest.approx((-1.2 + 3.0) / 2)
    out["pg_loss"].backward()
    assert torch.isfinite(log_prob.grad).all()


def test_clip_ratio_c_must_exceed_one():
    with pytest.raises(ValueError, match="clip_ratio_c"):
        compute_policy_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), clip_ratio_c=1.0)


def test_policy_loss_registry():
    assert get_policy_loss("vanilla") is compute_policy_loss
    assert POLICY_LOSSES["vanilla"] is compute_policy_loss
    with pytest.raises(ValueError, match="vanilla"):
        get_policy_loss("gspo-not-here")


def test_value_loss_clipping():
    # cliprange 0.5, old values 0:
    #   v=1.0, R=2: clipped v 0.5; (1-2)^2 = 1, (0.5-2)^2 = 2.25 -> 2.25, clipped side larger
    #   v=1.0, R=0: clipped v 0.5; 1 vs 0.25 -> 1
    #   v=0.2, R=1: inside the range; 0.64 vs 0.64 -> 0.64, not counted as clipped
    #   padding: v=9, R=-9
    vpreds = torch.tensor([[1.0, 1.0, 0.2, 9.0]], requires_grad=True)
    returns = torch.tensor([[2.0, 0.0, 1.0, -9.0]])
    values = torch.zeros(1, 4)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    vf_loss, vf_clipfrac = compute_value_loss(vpreds, returns, values, mask, cliprange_value=0.5)
    assert vf_loss.item() == pytest.approx(0.5 * (2.25 + 1.0 + 0.64) / 3)  # 0.648333
    assert vf_clipfrac.item() == pytest.approx(1 / 3)
    vf_loss.backward()
    # token 0: clipped branch, no gradient to vpreds; token 1: 0.5 * 2 * (1 - 0) / 3; token 2: 0.5*2*(0.2-1)/3
    torch.testing.assert_close(vpreds.grad, torch.tensor([[0.0, 1 / 3, -0.8 / 3, 0.0]]))


def test_value_loss_without_clipping():
    vpreds = torch.tensor([[1.0, 1.0]])
    vf_loss, vf_clipfrac = compute_value_loss(
        vpreds, torch.tensor([[2.0, 0.0]]), torch.zeros(1, 2), torch.ones(1, 2), cliprange_value=None
    )
    assert vf_loss.item() == pytest.approx(0.5)  # 0.5 * (1 + 1) / 2
    assert vf_clipfrac.item() == 0.0


# GSPO, old_log_prob = 0, clip 0.2 / 0.2. The sequence ratio s is the geometric mean of the row's token ratios:
#   row 1, A=+1, ratios (1.21, 1):  s = 1.1;  -1.1 vs -1.1 (no clip)          -> -1.1 on both tokens
#   row 2, A=+1, ratios (4, 4):     s = 4;    -4 vs -1.2: clip active         -> -1.2 on both tokens
#   row 3, A=-1, ratio 0.25:        s = 0.25; 0.25 vs 0.8: clip active        -> 0.8 (no dual clip in GSPO)
#   token-mean = (-2.2 - 2.4 + 0.8) / 5 = -0.76; clipfrac 3/5; gradient -A*s/5 on unclipped tokens, 0 on clipped
GSPO_LOG_PROB = torch.log(torch.tensor([[1.21, 1.0, 9.0], [4.0, 4.0, 9.0], [0.25, 9.0, 9.0]]))
GSPO_ADV = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
GSPO_MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_gspo_sequence_level_ratio():
    log_prob = GSPO_LOG_PROB.clone().requires_grad_(True)
    out = get_policy_loss("gspo")(torch.zeros(3, 3), log_prob, GSPO_ADV, GSPO_MASK, clip_ratio_low=0.2,
                                  clip_ratio_high=0.2, loss_agg_mode="token-mean")
    assert out["pg_loss"].item() == pytest.approx(-0.76, abs=1e-6)
    assert out["pg_clipfrac"].item() == pytest.approx(0.6, abs=1e-6)
    assert out["pg_clipfrac_lower"].item() == 0.0
    assert out["ppo_kl"].item() == pytest.approx(-(math.log(1.21) + 2 * math.log(4) + math.log(0.25)) / 5, abs=1e-6)
    out["pg_loss"].backward()
    expected = torch.tensor([[-1.1 / 5, -1.1 / 5, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(log_prob.grad, expected, atol=1e-6, rtol=0)


def test_rollout_is_weights_scale_each_token():
    # vanilla, old = new: ratio 1, loss -A per token; weights (2, 0.5) -> (-2 - 0.5) / 2 tokens
    out = get_policy_loss("vanilla")(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2),
                                     rollout_is_weights=torch.tensor([[2.0, 0.5]]))
    assert out["pg_loss"].item() == pytest.approx(-1.25, abs=1e-6)
