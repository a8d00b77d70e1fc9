"""GSM8K rule reward: scores exactly as verl's verl/utils/reward_score/gsm8k.py (differential, on cases built from
the real GSM8K answers and their common variants), hand-computed cases, and the lenient option."""
from __future__ import annotations

import json

import pytest

from engine.reward.gsm8k import CLIP_CHARS, compute_score, extract_solution, extract_solution_lenient

@pytest.fixture(scope="module")
def real_answers():
    from engine.data.gsm8k import extract_ground_truth, local_dir, local_dir_missing

    directory = local_dir()
    if directory is None:
        pytest.skip(local_dir_missing())

    out = []
    for split in ("train", "test"):
        with open(directory / f"{split}.jsonl") as f:
            for line in f:
                answer = json.loads(line)["answer"]
                out.append((answer, extract_ground_truth(answer)))
    return out


def _variants(answer: str, gt: str) -> list[str]:
    """A reference solution and what models write instead."""
    body = answer.rsplit("####", 1)[0]
    try:
        wrong = str(int(gt) + 1)
        thousands = f"{int(gt):,}"
    except ValueError:
        wrong, thousands = gt + "1", gt
    return [
        answer,
        body + f"The answer is {gt}.",
        body + f"#### {gt}.",
        body + f"#### ${gt}",
        body + f"#### {thousands}",
        body + f"The answer is {thousands}.",
        body + f"#### {wrong}",
        body + f"#### {gt} dollars. Total: {wrong}",
        body.replace("####", ""),
        "x" * (CLIP_CHARS - 3) + f"#### {gt}" if len(gt) > 1 else "#### 1234" + "y" * (CLIP_CHARS - 4),
        "",
    ]


def test_scores_exactly_as_verl_on_real_answers(real_answers):
    verl_gsm8k = pytest.importorskip("verl.utils.reward_score.gsm8k",
                                     reason="verl==0.9.1 (the reference) is not installed: run scripts/setup.sh")
    assert len(real_answers) > 8000
    cases = [(text, gt) for answer, gt in real_answers[:400] for text in _variants(answer, gt)]
    cases += real_answers[400::4]  # a quarter of the other reference solutions
    differ = {"strict": [], "flexible": []}
    for text, gt in cases:
        for method in differ:
            ours = compute_score(text, gt, method=method, format_score=0.1)
            theirs = verl_gsm8k.compute_score(text, gt, method=method, format_score=0.1)
            if ours != theirs or extract_solution(text, method) != verl_gsm8k.extract_solution(text, method):
                differ[method].append((text[-60:], gt, ours, theirs))
    assert len(cases) > 6000
    assert differ == {"strict": [], "flexible": []}
    assert all(compute_score(a, gt) == 1.0 for a, gt in real_answers)  # every reference solution, strict


@pytest.mark.parametrize("text, strict, flexible", [
    ("so #### 1,234", "1234", "1,234"),  # strict drops commas, flexible keeps them (verl)
    ("#### 72.", "72.", "72."),  # the sentence's full stop is part of the answer: "72." != "72"
    ("#### -5 apples", "-5", "-5"),
    ("first #### 1 then #### 2", "2", "2"),
    ("####72", None, "72"),
    ("The answer is 18. Done.", None, "18."),
    ("#### $18", None, "18"),  # no number right after "#### "
    ("no numbers here . , .", None, ","),  # flexible's last run that is not a lone '.'
    ("dots . .", None, "."),  # every run a lone '.': verl ends on the first
    ("", None, None),
])
def test_extraction_cases(text, strict, flexible):
    assert extract_solution(text, "strict") == strict
    assert extract_solution(text, "flexible") == flexible


def test_scores():
    assert compute_score("#### 18", "18") == 1.0
    assert compute_score("#### 18.", "18") == 0.0  # verl: "18." != "18"
    assert compute_score("#### 17", "18", format_score=0.1) == 0.1
    assert compute_score("no answer", "18", format_score=0.1) == 0.0
    assert compute_score("The answer is 18", "18", method="flexible", score=2.0) == 2.0


def test_only_the_tail_is_searched():
    far = "#### 42 " + "x" * CLIP_CHARS
    assert extract_solution(far) is None
    assert extract_solution("x" * 5000 + "#### 42") == "42"
    # a plain cut (verl) may split a number; the lenient reading moves the cut left to keep it whole
    text = "9" * 20 + "y" * (CLIP_CHARS - 10)
    assert extract_solution(text, "flexible") == "9" * 10
    assert extract_solution_lenient(text, "flexible") == "9" * 20


def test_lenient_option():
    assert compute_score("#### 18.", "18", lenient=True) == 1.0
    assert compute_score("The answer is 1,234.", "1234", method="flexible", lenient=True) == 1.0
    assert compute_score("#### 1,000", "1,000", lenient=True) == 1.0
    assert compute_score("#### 1000", 1000, lenient=True) == 1.0
    assert compute_score("dots . .", "1", method="flexible", lenient=True, format_score=0.1) == 0.0
    assert extract_solution_lenient("#### 72.") == "72"


def test_bad_method():
    with pytest.raises(ValueError, match="strict"):
        extract_solution("#### 1", method="loose")
    with pytest.raises(ValueError, match="strict"):
        compute_score("#### 1", "1", method="loose", lenient=True)
