import json

import pandas as pd
import pytest

from engine.data.arith import main, make_arith_rows, prepare_arith
from engine.data.files import DataError


def questions(rows):
    return [r["extra_info"]["question"] for r in rows]


def evaluate(question: str) -> int:
    expr = question.removesuffix("=?")
    for op in "+-*":
        a, sep, b = expr.partition(op)
        if sep and a and b:
            return {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
    raise AssertionError(f"not a question: {question}")


def test_rows_follow_verl_schema():
    rows = make_arith_rows(50, seed=0, split="train")
    assert len(rows) == 50
    for index, row in enumerate(rows):
        question = row["extra_info"]["question"]
        assert row["data_source"] == "arith"
        assert row["ability"] == "math"
        assert row["prompt"] == [{"role": "user", "content": question}]
        assert row["reward_model"] == {"style": "rule", "ground_truth": str(evaluate(question))}
        assert row["extra_info"] == {"split": "train", "index": index, "question": question,
                                     "answer": row["reward_model"]["ground_truth"]}


def test_operands_ops_and_negative_answers():
    rows = make_arith_rows(1000, seed=0, split="train")
    qs = questions(rows)
    operands = [int(x) for q in qs for x in q.removesuffix("=?").replace("-", "+").split("+")]
    assert min(operands) >= 10 and max(operands) <= 99
    assert {q[2] for q in qs} == {"+", "-"}
    assert any(r["reward_model"]["ground_truth"].startswith("-") for r in rows)

    only_plus = make_arith_rows(30, seed=0, split="test", ops="+", max_operand=20, min_operand=1)
    assert all("+" in q and "-" not in q for q in questions(only_plus))
    assert all(1 <= int(x) <= 20 for q in questions(only_plus) for x in q.removesuffix("=?").split("+"))


def test_deterministic_by_seed_and_prefix_stable():
    assert make_arith_rows(300, seed=3, split="train") == make_arith_rows(300, seed=3, split="train")
    assert questions(make_arith_rows(300, seed=3, split="train")) != questions(make_arith_rows(300, 4, "train"))
    assert make_arith_rows(1000, seed=0, split="test")[:200] == make_arith_rows(200, seed=0, split="test")


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_splits_are_disjoint(seed):
    train = set(questions(make_arith_rows(5000, seed, "train")))
    test = set(questions(make_arith_rows(1000, seed, "test")))
    assert len(train) == 5000 and len(test) == 1000  # no repeats within a split
    assert not train & test


def test_splits_are_disjoint_when_sampled_from_a_huge_space():
    kwargs = {"max_operand": 99999, "min_operand": 0, "ops": "+-*"}
    train = make_arith_rows(3000, 5, "train", **kwargs)
    test = make_arith_rows(500, 5, "test", **kwargs)
    assert not set(questions(train)) & set(questions(test))
    assert len(set(questions(train))) == 3000
    assert all(r["reward_model"]["ground_truth"] == str(evaluate(q)) for r, q in zip(train, questions(train)))
    assert make_arith_rows(100, 5, "train", **kwargs) == train[:100]


def test_bad_arguments_are_reported():
    with pytest.raises(DataError, match="split"):
        make_arith_rows(10, 0, "validation")
    with pytest.raises(DataError, match="only"):
        make_arith_rows(200, 0, "test", max_operand=15)  # 6*6*2 questions cannot give 200 test rows
    with pytest.raises(DataError, match="ops"):
        make_arith_rows(10, 0, "train", ops="/")


def test_prepare_writes_once_and_rewrites_on_new_parameters(tmp_path):
    paths = prepare_arith(tmp_path, train_size=300, test_size=100, seed=2)
    train = pd.read_parquet(paths["train"])
    test = pd.read_parquet(paths["test"])
    assert len(train) == 300 and len(test) == 100
    assert list(train["extra_info"].map(lambda e: e["question"])) == questions(make_arith_rows(300, 2, "train"))
    assert list(train["prompt"].iloc[0]) == [{"role": "user", "content": train["extra_info"].iloc[0]["question"]}]
    assert json.loads((tmp_path / "arith_params.json").read_text())["train_size"] == 300

    mtime = paths["train"].stat().st_mtime_ns
    prepare_arith(tmp_path, train_size=300, test_size=100, seed=2)
    assert paths["train"].stat().st_mtime_ns == mtime  # same parameters: nothing rewritten

    prepare_arith(tmp_path, train_size=400, test_size=100, seed=2)
    assert len(pd.read_parquet(paths["train"])) == 400


def test_cli_writes_both_splits(tmp_path, capsys):
    assert main(["--local_dir", str(tmp_path), "--train_size", "50", "--test_size", "20", "--seed", "1"]) == 0
    assert len(pd.read_parquet(tmp_path / "train.parquet")) == 50
    assert len(pd.read_parquet(tmp_path / "test.parquet")) == 20
    assert main(["--local_dir", str(tmp_path), "--test_size", "5000", "--max_operand", "20"]) == 2
    assert "error" in capsys.readouterr().err
