"""The advantage phase of a step: token rewards (scores minus the KL penalty when it is in the reward), then
the configured estimator's advantages and returns. The estimators themselves are engine/algos/advantages.py."""
from __future__ import annotations

from engine.algos.advantages import compute_advantage
from engine.algos.kl import apply_kl_penalty
from engine.protocol import Batch


def compute_advantages(batch: Batch, alg, kl_ctrl=None) -> tuple[Batch, dict[str, float]]:
    """Adds `token_level_rewards`, `advantages` and `returns` to `batch` (in place, and returns it) under the
    `algorithm` config section; the metrics are the KL penalty's (empty without KL in the reward)."""
    mask = batch["response_mask"].float()
    metrics: dict[str, float] = {}
    if alg.use_kl_in_reward:
        rewards, metrics = apply_kl_penalty(batch["token_level_scores"], batch["old_log_probs"],
                                            batch["ref_log_prob"], mask, kl_ctrl, alg.kl_penalty)
        batch.tensors["token_level_rewards"] = rewards
    else:
        batch.tensors["token_level_rewards"] = batch["token_level_scores"]
    advantages, returns = compute_advantage(
        alg.adv_estimator, token_level_rewards=batch["token_level_rewards"], response_mask=mask,
        values=batch.tensors.get("values"), index=batch["uid"], gamma=alg.gamma, lam=alg.lam,
        norm_adv_by_std_in_grpo=alg.norm_adv_by_std_in_grpo, reward_baselines=batch.tensors.get("reward_baselines"))
    batch.tensors["advantages"] = advantages
    batch.tensors["returns"] = returns
    return batch, dict(metrics)
