"""Rule reward for the synthetic arithmetic task: exact match of the answer."""
from __future__ import annotations


def compute_score(solution_str: str, ground_truth: str, **kwargs) -> float:
    """1.0 if the response, stripped of surrounding whitespace, is exactly the ground truth, else 0.0.

    The end token is already gone (responses are decoded with skip_special_tokens), so "135" scores and
    "135 apples", "0135" or "+135" do not: the task is to emit the number and stop.
    """
    return 1.0 if solution_str.strip() == str(ground_truth).strip() else 0.0
