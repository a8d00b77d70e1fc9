"""The built-in scorer: picks a rule reward by data_source."""
from __future__ import annotations

GSM8K_SOURCES = ("openai/gsm8k", "gsm8k")
ARITH_SOURCES = ("arith", "next_number")  # the answer alone, exact (engine/data/next_number.py too)
ARITH_TOOL_SOURCES = ("arith_tool",)


def default_compute_score(data_source, solution_str: str, ground_truth, extra_info=None, **kwargs) -> float:
    """Score one response. kwargs (reward_kwargs) go to the task's compute_score."""
    if data_source in GSM8K_SOURCES:
        from engine.reward import gsm8k

        score = gsm8k.compute_score(solution_str, ground_truth, **kwargs)
        if kwargs.get("format_score"):
            # a shaped reward: keep verl's strict accuracy beside it, so held-out accuracy (val-core/.../acc) stays
            # the number verl reports rather than the shaped mean
            return {"score": score, "acc": float(score == kwargs.get("score", 1.0))}
        return score
    if data_source in ARITH_SOURCES:
        from engine.reward import arith  # imported lazily: written separately, optional for other tasks

        return arith.compute_score(solution_str, ground_truth, **kwargs)
    if data_source in ARITH_TOOL_SOURCES:
        from engine.reward import arith_tool

        return arith_tool.compute_score(solution_str, ground_truth, **kwargs)
    known = ", ".join(repr(s) for s in GSM8K_SOURCES + ARITH_SOURCES + ARITH_TOOL_SOURCES)
    raise NotImplementedError(
        f"no built-in reward for data_source={data_source!r} (built in: {known}); write a scoring function "
        "`compute_score(data_source, solution_str, ground_truth, extra_info=None)` in a Python file and set "
        "custom_reward_function.path=/path/to/file.py (and custom_reward_function.name if it is not "
        "compute_score)")
