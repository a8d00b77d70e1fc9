"""A custom reward function (`custom_reward_function.path=<this file>`) that scores like the built-in reward and
also returns the answer as `pred`, so validation can vote on answers (verl's maj@k)."""
from __future__ import annotations

from engine.reward.default import default_compute_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    score = default_compute_score(data_source=data_source, solution_str=solution_str, ground_truth=ground_truth,
                                  extra_info=extra_info, **kwargs)
    return {"score": float(score), "pred": solution_str.strip()}
