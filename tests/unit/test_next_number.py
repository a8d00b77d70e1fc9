"""The real model's CPU task (engine/data/next_number.py): held-out numbers are never trained on, rows are
deterministic, the prompt is a chat with the two example turns, and the built-in scorer wants the bare answer."""
from __future__ import annotations

import pytest

from engine.data.files import DataError
from engine.data.next_number import SHOTS, make_rows, prepare
from engine.reward.default import default_compute_score


def numbers(rows):
    return {int(r["extra_info"]["answer"]) - 1 for r in rows}


def test_held_out_numbers_are_never_trained_on():
    test = make_rows(99, 0, "test")
    train = make_rows(4000, 0, "train")
    assert len(numbers(test)) == 99
    assert not numbers(test) & numbers(train)
    assert not {q for q, _ in SHOTS} & (numbers(test) | numbers(train))  # the examples are asked of neither


def test_rows_are_deterministic_and_chat_shaped():
    a, b = make_rows(50, 3, "train"), make_rows(50, 3, "train")
    assert a == b
    row = a[0]
    roles = [m["role"] for m in row["prompt"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    n = int(row["prompt"][-1]["content"].removeprefix("What number comes after ").removesuffix("?"))
    assert row["reward_model"]["ground_truth"] == str(n + 1)
    assert make_rows(50, 4, "train") != a  # another seed, another order


def test_too_many_test_rows_is_a_clear_error():
    with pytest.raises(DataError, match="held-out pool has 99"):
        make_rows(100, 0, "test")


def test_prepare_writes_parquet_once(tmp_path):
    paths = prepare(tmp_path, train_size=20, test_size=5)
    mtime = paths["train"].stat().st_mtime_ns
    assert prepare(tmp_path, train_size=20, test_size=5) == paths
    assert paths["train"].stat().st_mtime_ns == mtime  # same parameters: not rewritten


@pytest.mark.parametrize("answer,score", [("675", 1.0), (" 675\n", 1.0), ("676", 0.0), ("The answer is 675.", 0.0)])
def test_the_built_in_scorer_wants_the_bare_answer(answer, score):
    assert default_compute_score("next_number", answer, "675") == score
