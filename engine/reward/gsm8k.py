"""GSM8K rule reward: compare the final number of a response with the ground truth.

Only the last `CLIP_CHARS` characters of a response are searched: the final answer sits at the end, and
regexes over long (possibly degenerate, repetitive) generations would otherwise dominate the reward
loop. The cut is moved left so it never splits a number.
"""
from __future__ import annotations

import re

CLIP_CHARS = 300

# "#### " then a number: optional minus, digits with optional thousands commas / decimal part.
_STRICT = re.compile(r"#### (-?(?:[0-9][0-9,]*(?:\.[0-9]*)?|\.[0-9]+))")
# Any number (must contain a digit, so lone "." or "," never count).
_ANY_NUMBER = re.compile(r"-?(?:[0-9][0-9,]*(?:\.[0-9]*)?|\.[0-9]+)")


def _tail(text: str) -> str:
    if len(text) <= CLIP_CHARS:
        return text
    start = len(text) - CLIP_CHARS
    while start > 0 and (text[start - 1].isdigit() or text[start - 1] in ",.-"):
        start -= 1
    return text[start:]


def _normalize(number: str) -> str:
    number = number.replace(",", "").strip()
    return number.removesuffix(".")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The final answer as a string, or None.

    strict: the number after the last "#### " marker; flexible: the last number anywhere.
    Commas are removed and a trailing "." (end of sentence) dropped.
    """
    if method not in ("strict", "flexible"):
        raise ValueError(f"method must be 'strict' or 'flexible', got {method!r}")
    text = _tail(solution_str)
    found = _STRICT.findall(text) if method == "strict" else _ANY_NUMBER.findall(text)
    for candidate in reversed(found):
        value = _normalize(candidate)
        if value not in ("", ".", "-"):
            return value
    return None


def compute_score(solution_str: str, ground_truth, method: str = "strict", format_score: float = 0.0,
                  score: float = 1.0) -> float:
    """`score` if the extracted answer equals the ground truth, `format_score` if an answer was found but is
    wrong, 0 if none was found."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return float(score) if answer == _normalize(str(ground_truth)) else float(format_score)
