"""GSM8K rule reward: compare the final number of a response with the ground truth.

By default it scores exactly as verl's `verl/utils/reward_score/gsm8k.py` (checked case by case in
tests/unit/test_reward_gsm8k.py), because published verl GSM8K numbers are measured that way:

- only the last `CLIP_CHARS` characters are searched (a plain cut, which may split a number);
- strict: the last "#### " followed by a run of digits, '.', ',' (optionally after '-'); commas are removed;
- flexible: the last such run anywhere that is not a lone '.'; commas are kept;
- the answer must equal the ground truth string exactly: "#### 18." reads "18." and scores `format_score`.

`lenient=True` (reward_kwargs) is a more forgiving match: the cut never splits a number, commas are removed and a
trailing '.' (end of sentence) dropped in both modes, and the ground truth is normalised the same way.
"""
from __future__ import annotations

import re

CLIP_CHARS = 300

# verl's character class: digits, '.' and ',' after an optional '-'
_STRICT = re.compile(r"#### (-?[0-9.,]+)")
_ANY = re.compile(r"(-?[0-9.,]+)")
# lenient: a number must contain a digit, so a lone '.' or ',' never counts
_LENIENT_STRICT = re.compile(r"#### (-?(?:[0-9][0-9,]*(?:\.[0-9]*)?|\.[0-9]+))")
_LENIENT_ANY = re.compile(r"-?(?:[0-9][0-9,]*(?:\.[0-9]*)?|\.[0-9]+)")


def _check(method: str) -> None:
    if method not in ("strict", "flexible"):
        raise ValueError(f"method must be 'strict' or 'flexible', got {method!r}")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """verl's extraction: the answer string, or None when there is none."""
    _check(method)
    text = solution_str[-CLIP_CHARS:]
    if method == "strict":
        found = _STRICT.findall(text)
        return found[-1].replace(",", "").replace("$", "") if found else None
    found = _ANY.findall(text)
    if not found:
        return None
    # the last run that is not a lone '.'; if every run is one, verl ends its search on the first run
    return next((x for x in reversed(found) if x not in ("", ".")), found[0])


def _tail(text: str) -> str:
    if len(text) <= CLIP_CHARS:
        return text
    start = len(text) - CLIP_CHARS
    while start > 0 and (text[start - 1].isdigit() or text[start - 1] in ",.-"):
        start -= 1
    return text[start:]


def _normalize(number: str) -> str:
    return number.replace(",", "").strip().removesuffix(".")


def extract_solution_lenient(solution_str: str, method: str = "strict") -> str | None:
    """The lenient extraction: whole numbers only, commas removed, a trailing '.' dropped."""
    _check(method)
    text = _tail(solution_str)
    found = _LENIENT_STRICT.findall(text) if method == "strict" else _LENIENT_ANY.findall(text)
    for candidate in reversed(found):
        value = _normalize(candidate)
        if value not in ("", ".", "-"):
            return value
    return None


def compute_score(solution_str: str, ground_truth, method: str = "strict", format_score: float = 0.0,
                  score: float = 1.0, lenient: bool = False) -> float:
    """`score` if the extracted answer equals the ground truth, `format_score` if an answer was found but is
    wrong, 0 if none was found."""
    if lenient:
        answer = extract_solution_lenient(solution_str, method)
        expected = _normalize(str(ground_truth))
    else:
        answer = extract_solution(solution_str, method)
        expected = ground_truth  # compared as given, like verl (the data's ground truth is a string)
    if answer is None:
        return 0.0
    return float(score) if answer == expected else float(format_score)
