"""RL algorithm core as pure tensor functions: no devices, no distributed code, no I/O.

Tensors are [B, R] over response tokens with `response_mask` marking valid ones.
"""

from engine.algos.advantages import (
    ADV_ESTIMATORS,
    GroupStats,
    compute_advantage,
    compute_group_stats,
    get_adv_estimator,
    register_adv_estimator,
)
from engine.algos.kl import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    kl_penalty,
    make_kl_controller,
)
from engine.algos.logprob import logprobs_and_entropy
from engine.algos.losses import (
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    agg_loss,
    compute_policy_loss,
    compute_value_loss,
    get_policy_loss,
    register_policy_loss,
)
from engine.algos.utils import masked_mean, masked_sum, masked_var, masked_whiten

__all__ = [
    "ADV_ESTIMATORS",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "FixedKLController",
    "GroupStats",
    "agg_loss",
    "apply_kl_penalty",
    "compute_advantage",
    "compute_group_stats",
    "compute_policy_loss",
    "compute_value_loss",
    "get_adv_estimator",
    "get_policy_loss",
    "kl_penalty",
    "logprobs_and_entropy",
    "make_kl_controller",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "register_adv_estimator",
    "register_policy_loss",
]
