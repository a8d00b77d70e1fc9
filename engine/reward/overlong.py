"""DAPO's overlong reward shaping (verl's `dapo` reward manager, `reward_kwargs.overlong_buffer_cfg`): a response
that runs into the last `len` tokens before `max_resp_len` loses reward linearly, down to -penalty_factor at the
cap, so the policy learns to finish before it is cut off instead of being scored on truncated answers."""
from __future__ import annotations


def overlong_penalty(response_length: int, max_resp_len: int, buffer_len: int, penalty_factor: float) -> float:
    """min(0, -(length - (max_resp_len - buffer_len)) / buffer_len * penalty_factor)."""
    if buffer_len <= 0:
        raise ValueError(f"overlong_buffer_cfg.len must be > 0 when the overlong penalty is on, got {buffer_len}")
    exceed = response_length - (max_resp_len - buffer_len)
    return min(-exceed / buffer_len * penalty_factor, 0.0)
