"""Rewards: rule scorers per data_source, custom scoring functions, the batch RewardManager, reward models."""
from engine.reward.custom import RewardFunctionError, load_custom_reward_fn
from engine.reward.default import default_compute_score
from engine.reward.manager import RewardManager, RewardResult

__all__ = ["RewardFunctionError", "RewardManager", "RewardResult", "default_compute_score",
           "load_custom_reward_fn"]
