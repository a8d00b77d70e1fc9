"""GSM8K preprocessing: verl schema, ground truths, CLI errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.data import gsm8k
from engine.data.files import DataError

REPO = Path(__file__).resolve().parents[2]
GSM8K_DIR = gsm8k.local_dir()  # $RLSTUDIO_GSM8K or shared/data/gsm8k beside the checkout
needs_gsm8k = pytest.mark.skipif(GSM8K_DIR is None, reason=gsm8k.local_dir_missing())


def _jsonl(path: Path, n: int | None = None) -> list[dict]:
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return rows if n is None else rows[:n]


def test_the_local_copy_is_where_rlstudio_gsm8k_says(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSTUDIO_GSM8K", str(tmp_path))
    assert gsm8k.local_dir() is None
    assert str(tmp_path) in gsm8k.local_dir_missing() and "set RLSTUDIO_GSM8K" in gsm8k.local_dir_missing()
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "Q1?", "answer": "1\n#### 1"}) + "\n")
    assert gsm8k.local_dir(["train.jsonl"]) == tmp_path and gsm8k.local_dir() is None  # test.jsonl missing
    (tmp_path / "test.jsonl").write_text("")
    assert gsm8k.local_dir() == tmp_path


def test_the_bench_prompts_come_from_the_local_copy_or_say_why_not(tmp_path, monkeypatch, capsys):
    from engine.bench.workloads import gsm8k_questions

    monkeypatch.setenv("RLSTUDIO_GSM8K", str(tmp_path))
    synthetic = gsm8k_questions(2)  # absent: synthetic questions, and the message says where it looked
    assert len(synthetic) == 2 and f"looked in {tmp_path}" in capsys.readouterr().err
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "Q1?", "answer": "1\n#### 1"}) + "\n")
    assert gsm8k_questions(2) == ["Q1? " + gsm8k.INSTRUCTION] * 2


@pytest.fixture(scope="module")
def processed(tmp_path_factory):
    if GSM8K_DIR is None:
        pytest.skip(gsm8k.local_dir_missing())
    out = tmp_path_factory.mktemp("gsm8k")
    assert gsm8k.main(["--local_dir", str(out), "--input", str(GSM8K_DIR)]) == 0
    return out


@needs_gsm8k
def test_real_gsm8k_schema_and_counts(processed):
    for split in ("train", "test"):
        table = pq.read_table(processed / f"{split}.parquet")
        assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        assert table.num_rows == len(_jsonl(GSM8K_DIR / f"{split}.jsonl"))
        # verl's nested types: list<struct<role, content>> and structs
        prompt_type = table.schema.field("prompt").type
        assert pa.types.is_list(prompt_type) and pa.types.is_struct(prompt_type.value_type)
        assert {prompt_type.value_type.field(i).name for i in range(prompt_type.value_type.num_fields)} == {
            "role", "content"}
        assert pa.types.is_struct(table.schema.field("reward_model").type)
        assert set(table.column("data_source").to_pylist()) == {"openai/gsm8k"}
        assert set(table.column("ability").to_pylist()) == {"math"}


@needs_gsm8k
def test_real_gsm8k_first_rows_match_jsonl(processed):
    raw = _jsonl(GSM8K_DIR / "train.jsonl", 3)
    rows = pq.read_table(processed / "train.parquet").slice(0, 3).to_pylist()
    # Ground truths written out by hand from the jsonl's "#### N" lines.
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["72", "10", "5"]
    assert raw[0]["answer"].endswith("#### 72") and raw[1]["answer"].endswith("#### 10")
    for i, (row, ex) in enumerate(zip(rows, raw)):
        assert row["prompt"] == [{"role": "user", "content": ex["question"] + " " + gsm8k.INSTRUCTION}]
        assert gsm8k.INSTRUCTION == 'Let\'s think step by step and output the final answer after "####".'
        assert row["reward_model"]["style"] == "rule"
        assert row["extra_info"] == {"split": "train", "index": i, "answer": ex["answer"], "question": ex["question"]}
    test_rows = pq.read_table(processed / "test.parquet").slice(0, 1).to_pylist()
    assert test_rows[0]["reward_model"]["ground_truth"] == "18"
    assert test_rows[0]["extra_info"]["split"] == "test"


@needs_gsm8k
def test_real_gsm8k_commas_removed(processed):
    raw = _jsonl(GSM8K_DIR / "train.jsonl")
    rows = pq.read_table(processed / "train.parquet", columns=["reward_model"]).column("reward_model").to_pylist()
    with_comma = [i for i, ex in enumerate(raw) if "," in ex["answer"].split("####")[-1]]
    assert with_comma, "expected some GSM8K answers like '#### 1,080'"
    for i in with_comma:
        assert rows[i]["ground_truth"] == raw[i]["answer"].split("####")[-1].strip().replace(",", "")
        assert "," not in rows[i]["ground_truth"]


def test_make_row_ground_truth():
    row = gsm8k.make_row({"question": "Q?", "answer": "work\n#### 1,234 "}, "train", 7)
    assert row["reward_model"] == {"style": "rule", "ground_truth": "1234"}
    assert row["extra_info"]["index"] == 7
    with pytest.raises(DataError, match="####"):
        gsm8k.make_row({"question": "Q?", "answer": "no marker"}, "train", 0)


def test_missing_input_dir_is_a_clear_error(tmp_path, capsys):
    rc = gsm8k.main(["--local_dir", str(tmp_path / "out"), "--input", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "nope" in err and "train.jsonl" in err


def test_missing_split_file_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n")
    rc = gsm8k.main(["--local_dir", str(tmp_path / "out"), "--input", str(tmp_path)])
    assert rc == 2
    assert "test.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "out" / "train.parquet").exists()


def test_without_datasets_suggests_input(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    rc = gsm8k.main(["--local_dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "datasets" in err and "--input" in err


def test_cli_error_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "engine.data.gsm8k", "--local_dir", str(tmp_path),
                           "--input", str(tmp_path / "missing")], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "missing" in proc.stderr


def test_cli_writes_parquet_from_small_input(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for split, n in (("train", 3), ("test", 2)):
        lines = [json.dumps({"question": f"{split} q{i}", "answer": f"steps\n#### {i + 10}"}) for i in range(n)]
        (src / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    assert gsm8k.main(["--local_dir", str(tmp_path / "out"), "--input", str(src)]) == 0
    test_rows = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in test_rows] == ["10", "11"]
    assert [r["extra_info"]["index"] for r in test_rows] == [0, 1]
    assert test_rows[1]["prompt"][0]["content"].startswith("test q1 Let's think")
