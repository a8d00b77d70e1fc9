"""Rule reward for arithmetic answered with a tool (data_source "arith_tool"): the final answer must be exact.

The response is the whole conversation: the model's turns and the tool answers between them, e.g.
`<c>123*456</c>=56088\n56088` (engine/rollout/formats.py, compact format: a tool answer ends with a newline).
The final answer is the text after the last newline, so a call alone (`<c>123*456</c>=56088\n`, the model never
stating the result) scores 0, and so does a result the model only copied into a call. Without a call the whole
response is the answer, as in the plain arith reward.
"""
from __future__ import annotations

from engine.reward.arith import compute_score as exact_answer


def final_answer(solution_str: str) -> str:
    return solution_str.rsplit("\n", 1)[-1]


def compute_score(solution_str: str, ground_truth: str, **kwargs) -> float:
    return exact_answer(final_answer(solution_str), ground_truth)
