"""KL between the policy and the reference model: per-token estimators, coefficient controllers, reward penalty.

Estimator names follow verl and Schulman's "Approximating KL Divergence" (k1, k2, k3).
"""

from __future__ import annotations

from typing import Any

import torch

from engine import metric_names
from engine.algos.utils import masked_mean
from engine.config.vocab import KLEstimator, names

# the names are declared once (engine/config/vocab.py); "full" is verl's name, refused below with the reason
KL_KINDS = tuple(k for k in names(KLEstimator) if not k.endswith("+")) + ("full",)
# "<kind>+" (verl): the value of <kind>, the gradient of k2. k1 and k3 estimate KL without bias, but their
# gradients do not estimate KL's gradient; k2's does.
STRAIGHT_THROUGH_KINDS = tuple(k for k in names(KLEstimator) if k.endswith("+") and k not in ("mse+", "k2+"))


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate of the policy against the reference from the sampled tokens' log-probs."""
    if kind in ("mse+", "k2+"):
        kind = kind[:-1]
    if kind in STRAIGHT_THROUGH_KINDS:
        value = kl_penalty(log_prob, ref_log_prob, kind[:-1])
        k2 = kl_penalty(log_prob, ref_log_prob, "k2")
        return k2 - k2.detach() + value.detach()
    if kind in ("kl", "k1"):
        return log_prob - ref_log_prob
    if kind == "abs":
        return (log_prob - ref_log_prob).abs()
    if kind in ("mse", "k2"):
        return 0.5 * (log_prob - ref_log_prob).square()
    if kind in ("low_var_kl", "k3"):
        # Clamp before exp: past |20| the result is clamped to 10 anyway, and exp overflow would turn
        # the (zero) gradient through the output clamp into inf * 0 = NaN.
        log_ratio = torch.clamp(ref_log_prob - log_prob, -20.0, 20.0)
        kl = torch.exp(log_ratio) - log_ratio - 1.0
        return torch.clamp(kl, -10.0, 10.0)
    if kind == "full":
        raise NotImplementedError(
            "kl kind 'full' needs the full-vocabulary distributions of both models, not sampled-token "
            "log-probs; use one of kl/k1, abs, mse/k2, low_var_kl/k3"
        )
    raise ValueError(f"unknown kl kind {kind!r}; valid kinds: {', '.join(KL_KINDS + STRAIGHT_THROUGH_KINDS)}")


# ---- controllers -----------------------------------------------------------------------------------


class FixedKLController:
    """Constant KL coefficient."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {"type": "fixed", "value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """Coefficient steered towards target_kl (Ziegler et al. 2019): a proportional controller whose
    per-sample step is capped at ±20% of the horizon-normalised error."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if target_kl <= 0:
            raise ValueError(f"target_kl must be > 0, got {target_kl}")
        if horizon <= 0:
            raise ValueError(f"horizon must be > 0, got {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + proportional_error * n_steps / self.horizon

    def state_dict(self) -> dict[str, Any]:
        return {"type": "adaptive", "value": self.value, "target_kl": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # Only the coefficient is state; target and horizon come from the (possibly edited) config.
        self.value = float(state["value"])


KLController = FixedKLController | AdaptiveKLController


def make_kl_controller(
    type: str, kl_coef: float, target_kl: float | None = None, horizon: int | None = None
) -> KLController:
    """type 'fixed' -> FixedKLController(kl_coef); 'adaptive' -> AdaptiveKLController(kl_coef, target_kl, horizon)."""
    if type == "fixed":
        return FixedKLController(kl_coef)
    if type == "adaptive":
        if target_kl is None or horizon is None:
            raise ValueError("an adaptive KL controller needs target_kl and horizon")
        return AdaptiveKLController(kl_coef, target_kl, horizon)
    raise ValueError(f"unknown kl controller type {type!r}; valid types: fixed, adaptive")


# ---- reward penalty --------------------------------------------------------------------------------


@torch.no_grad()
def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_ctrl: KLController,
    kind: str = "kl",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token rewards = scores - beta * per-token KL; then feeds the batch KL to the controller.

    The reported coefficient is the one applied to this batch (read before the controller update).
    """
    mask = response_mask.to(token_level_scores.dtype)
    kl = kl_penalty(log_prob, ref_log_prob, kind)
    kl = torch.where(mask != 0, kl * mask, torch.zeros_like(kl))  # where: padding may hold inf log-probs
    beta = kl_ctrl.value
    token_level_rewards = token_level_scores - beta * kl

    current_kl = masked_mean(kl, mask, dim=-1).mean().item()
    kl_ctrl.update(current_kl, n_steps=token_level_scores.shape[0])
    metrics = {metric_names.KL_IN_REWARD: current_kl, f"{metric_names.KL_IN_REWARD}_coeff": beta}
    return token_level_rewards, metrics
