"""KL estimators, controllers and the reward penalty, against hand-computed numbers."""

import math

import pytest
import torch

from engine.algos.kl import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    kl_penalty,
    make_kl_controller,
)

LOG_PROB = torch.tensor([-1.0, -2.0])
REF_LOG_PROB = torch.tensor([-1.5, -1.0])
# log_prob - ref = (0.5, -1.0)


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("kl", [0.5, -1.0]),
        ("k1", [0.5, -1.0]),
        ("abs", [0.5, 1.0]),
        ("mse", [0.125, 0.5]),  # 0.5 * 0.25, 0.5 * 1
        ("k2", [0.125, 0.5]),
        # d = ref - log_prob = (-0.5, 1.0): e^d - d - 1 = (0.6065307 + 0.5 - 1, 2.7182818 - 1 - 1)
        ("low_var_kl", [math.exp(-0.5) - 0.5, math.e - 2.0]),
        ("k3", [0.10653066, 0.71828183]),
    ],
)
def test_kl_kinds(kind, expected):
    torch.testing.assert_close(kl_penalty(LOG_PROB, REF_LOG_PROB, kind), torch.tensor(expected))


def test_low_var_kl_is_clamped_and_gradient_finite():
    log_prob = torch.tensor([0.0, 0.0], requires_grad=True)
    ref = torch.tensor([15.0, -30.0])  # e^15 - 16 >> 10; e^-30 + 30 - 1 = 29 > 10
    kl = kl_penalty(log_prob, ref, "low_var_kl")
    torch.testing.assert_close(kl, torch.tensor([10.0, 10.0]))
    kl.sum().backward()
    assert torch.isfinite(log_prob.grad).all()


def test_full_and_unknown_kinds():
    with pytest.raises(NotImplementedError, match="full"):
        kl_penalty(LOG_PROB, REF_LOG_PROB, "full")
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(LOG_PROB, REF_LOG_PROB, "k4")


def test_fixed_controller_never_moves():
    ctrl = FixedKLController(0.05)
    ctrl.update(current_kl=100.0, n_steps=1000)
    assert ctrl.value == 0.05


def test_adaptive_controller_updates():
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=6.0, horizon=10000)
    ctrl.update(current_kl=9.0, n_steps=100)  # err = 9/6 - 1 = 0.5 -> clipped 0.2; x(1 + 0.2*100/1e4) = x1.002
    assert ctrl.value == pytest.approx(0.1002)
    ctrl.update(current_kl=3.0, n_steps=500)  # err = -0.5 -> -0.2; x(1 - 0.2*500/1e4) = x0.99
    assert ctrl.value == pytest.approx(0.1002 * 0.99)  # 0.099198
    ctrl.update(current_kl=6.6, n_steps=1000)  # err = 0.1 (inside the clip); x(1 + 0.1*1000/1e4) = x1.01
    assert ctrl.value == pytest.approx(0.099198 * 1.01)


def test_controller_state_round_trip():
    ctrl = AdaptiveKLController(0.1, 6.0, 10000)
    ctrl.update(9.0, 100)
    resumed = make_kl_controller("adaptive", kl_coef=0.1, target_kl=6.0, horizon=10000)
    resumed.load_state_dict(ctrl.state_dict())
    assert resumed.value == pytest.approx(0.1002)
    fixed = make_kl_controller("fixed", kl_coef=0.3)
    assert isinstance(fixed, FixedKLController) and fixed.value == 0.3
    with pytest.raises(ValueError, match="fixed, adaptive"):
        make_kl_controller("pid", kl_coef=0.1)
    with pytest.raises(ValueError):
        make_kl_controller("adaptive", kl_coef=0.1)


def test_apply_kl_penalty():
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    log_prob = torch.full((2, 3), -1.0)
    ref = torch.tensor([[-1.5, -1.0, -0.5], [-2.0, -1.0, -9.0]])
    # kl = log_prob - ref = [[0.5, 0, -0.5], [1, 0, (8, padding -> 0)]]
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.5, horizon=4)
    rewards, metrics = apply_kl_penalty(scores, log_prob, ref, mask, ctrl, kind="kl")
    # rewards = scores - 0.1 * kl
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 0.0, 1.05], [-0.1, 2.0, 0.0]]))
    # per-sequence mean kl: 0/3 = 0 and 1/2 = 0.5 -> batch 0.25
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(0.25)
    assert metrics["actor/reward_kl_penalty_coeff"] == pytest.approx(0.1)  # the coefficient used
    # update with n_steps = B = 2: err = 0.25/0.5 - 1 = -0.5 -> -0.2; x(1 - 0.2*2/4) = x0.9
    assert ctrl.value == pytest.approx(0.09)
