"""RLDataset / read_rows / collate / PromptLoader with a locally built tokenizer (no hub access)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from engine.data.dataset import DataError, PromptLoader, RLDataset, collate, read_rows
from engine.data.files import write_parquet
from engine.data.gsm8k import local_dir, local_dir_missing
from tests.unit.bpe_tokenizer import build_bpe_tokenizer

GSM8K_DIR = local_dir(["test.jsonl"])  # $RLSTUDIO_GSM8K or shared/data/gsm8k beside the checkout

QWEN_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_bpe_tokenizer(tmp_path_factory.mktemp("tok"),
                               "Let's think step by step and output the final answer after ####. 0123456789",
                               bos="<s>", chat_template=QWEN_TEMPLATE)


def make_rows(n: int, source: str = "openai/gsm8k", with_index: bool = True) -> list[dict]:
    rows = []
    for i in range(n):
        row = {"data_source": source, "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
               "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(2 * i)}}
        if with_index:
            row["extra_info"] = {"split": "train", "index": 100 + i}
        rows.append(row)
    return rows


def write_jsonl(rows, path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def expected_ids(tokenizer, content: str) -> list[int]:
    text = "<s><|im_start|>user\n" + content + "<|im_end|>\n<|im_start|>assistant\n"
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# ---- read_rows -------------------------------------------------------------------------------------
def test_read_rows_jsonl_parquet_and_lists(tmp_path, monkeypatch):
    rows = make_rows(3)
    j = write_jsonl(rows, tmp_path / "a.jsonl")
    p = write_parquet(make_rows(2, source="x"), tmp_path / "b.parquet")
    assert read_rows(j) == rows
    assert [r["data_source"] for r in read_rows([j, p])] == ["openai/gsm8k"] * 3 + ["x"] * 2
    assert read_rows(p)[1]["prompt"] == [{"role": "user", "content": "What is 1 + 1?"}]
    monkeypatch.setenv("HOME", str(tmp_path))
    assert len(read_rows("~/a.jsonl")) == 3


def test_read_rows_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        read_rows([tmp_path / "nothere.parquet"])
    assert "nothere.parquet" in str(e.value)
    assert "python -m engine.data.gsm8k --local_dir" in str(e.value)
    assert "python -m engine.data.arith --local_dir" in str(e.value)
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(DataError, match=r"unsupported .*'\.csv'"):
        read_rows(tmp_path / "x.csv")


# ---- RLDataset -------------------------------------------------------------------------------------
def test_item_contents_and_single_bos(tmp_path, tokenizer):
    ds = RLDataset(write_jsonl(make_rows(3), tmp_path / "d.jsonl"), tokenizer)
    assert len(ds) == 3
    item = ds[1]
    assert item["input_ids"] == expected_ids(tokenizer, "What is 1 + 1?")
    bos = tokenizer.bos_token_id
    assert item["input_ids"].count(bos) == 1  # the template's BOS only; the tokenizer's is not added again
    assert item["prompt_text"] == "<s><|im_start|>user\nWhat is 1 + 1?<|im_end|>\n<|im_start|>assistant\n"
    assert item["raw_prompt"] == [{"role": "user", "content": "What is 1 + 1?"}]
    assert item["data_source"] == "openai/gsm8k" and item["ground_truth"] == "2"
    assert item["ability"] == "math" and item["reward_style"] == "rule"
    assert item["extra_info"] == {"split": "train", "index": 101}
    assert item["prompt_index"] == 101 and type(item["prompt_index"]) is int


def test_plain_string_prompt_and_missing_ground_truth(tmp_path, tokenizer):
    rows = [{"data_source": "arith", "prompt": "2+2=?"}]
    ds = RLDataset(write_jsonl(rows, tmp_path / "s.jsonl"), tokenizer)
    assert ds[0]["raw_prompt"] == [{"role": "user", "content": "2+2=?"}]
    assert ds[0]["input_ids"] == expected_ids(tokenizer, "2+2=?")
    assert ds[0]["ground_truth"] is None and ds[0]["extra_info"] == {}


def test_custom_template_and_raw_prompt(tmp_path, tokenizer):
    path = write_jsonl([{"data_source": "arith", "prompt": "2+2=?"}], tmp_path / "s.jsonl")
    ds = RLDataset(path, tokenizer, chat_template="Q: {{ messages[0]['content'] }}\nA:")
    assert ds[0]["prompt_text"] == "Q: 2+2=?\nA:"
    raw = RLDataset(path, tokenizer, apply_chat_template=False)
    assert raw[0]["prompt_text"] == "2+2=?"
    assert raw[0]["input_ids"] == tokenizer("2+2=?")["input_ids"]  # raw text: the tokenizer's own BOS


def test_prompt_index_falls_back_to_position_across_files(tmp_path, tokenizer):
    a = write_jsonl(make_rows(3, with_index=False), tmp_path / "a.jsonl")
    b = write_parquet(make_rows(2, with_index=False), tmp_path / "b.parquet")
    ds = RLDataset([a, b], tokenizer)
    assert [ds[i]["prompt_index"] for i in range(len(ds))] == [0, 1, 2, 3, 4]


def test_verl_style_parquet_loads(tmp_path, tokenizer):
    msg = pa.struct([("content", pa.string()), ("role", pa.string())])
    schema = pa.schema([
        ("data_source", pa.string()), ("prompt", pa.list_(msg)), ("ability", pa.string()),
        ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
        ("extra_info", pa.struct([("answer", pa.string()), ("index", pa.int64()), ("question", pa.string()),
                                  ("split", pa.string())])),
    ])
    data = {
        "data_source": ["openai/gsm8k"] * 2,
        "prompt": [[{"content": "Q0", "role": "user"}], [{"content": "Q1", "role": "user"}]],
        "ability": ["math"] * 2,
        "reward_model": [{"ground_truth": "72", "style": "rule"}, {"ground_truth": "10", "style": "rule"}],
        "extra_info": [{"answer": "a #### 72", "index": 5, "question": "Q0", "split": "train"},
                       {"answer": "b #### 10", "index": 6, "question": "Q1", "split": "train"}],
    }
    path = tmp_path / "verl.parquet"
    pq.write_table(pa.table(data, schema=schema), path)
    ds = RLDataset(str(path), tokenizer)
    assert [ds[i]["ground_truth"] for i in range(2)] == ["72", "10"]
    assert ds[1]["input_ids"] == expected_ids(tokenizer, "Q1")
    assert ds[1]["prompt_index"] == 6

    # The same file through pandas: numpy arrays of dicts and numpy ints inside.
    records = pd.read_parquet(path).to_dict("records")
    assert isinstance(records[0]["prompt"], np.ndarray)
    ds2 = RLDataset(None, tokenizer, rows=records)
    assert ds2[1]["input_ids"] == ds[1]["input_ids"]
    assert ds2[1]["raw_prompt"] == [{"content": "Q1", "role": "user"}]
    assert type(ds2[1]["prompt_index"]) is int and ds2[1]["prompt_index"] == 6


@pytest.mark.skipif(GSM8K_DIR is None, reason=local_dir_missing(["test.jsonl"]))
def test_real_gsm8k_parquet_through_dataset(tmp_path, tokenizer):
    from engine.data import gsm8k

    raw = read_rows(GSM8K_DIR / "test.jsonl")[:8]
    path = write_parquet(gsm8k.make_rows(raw, "test"), tmp_path / "test.parquet")
    ds = RLDataset(path, tokenizer, max_prompt_length=4096)
    assert ds[0]["ground_truth"] == "18"
    assert ds[3]["prompt_text"].startswith("<s><|im_start|>user\n" + raw[3]["question"])
    assert [ds[i]["prompt_index"] for i in range(8)] == list(range(8))


def test_missing_prompt_column_error(tmp_path, tokenizer):
    path = write_jsonl([{"question": "q", "data_source": "x"}], tmp_path / "noprompt.jsonl")
    with pytest.raises(DataError) as e:
        RLDataset(path, tokenizer)
    msg = str(e.value)
    assert "'prompt'" in msg and "noprompt.jsonl" in msg
    assert "['data_source', 'question']" in msg and "data.prompt_key" in msg
    assert RLDataset(path, tokenizer, prompt_key="question")[0]["raw_prompt"][0]["content"] == "q"


def test_no_chat_template_error(tmp_path, tokenizer):
    import copy

    bare = copy.deepcopy(tokenizer)
    bare.chat_template = None
    with pytest.raises(DataError, match="apply_chat_template=False"):
        RLDataset(write_jsonl(make_rows(1), tmp_path / "d.jsonl"), bare)


LONG = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen"


def _long_rows():
    return [{"data_source": "x", "prompt": "short"}, {"data_source": "x", "prompt": LONG}]


def test_truncation_modes(tmp_path, tokenizer):
    path = write_jsonl(_long_rows(), tmp_path / "long.jsonl")
    full = expected_ids(tokenizer, LONG)
    m = len(full) - 7
    assert len(expected_ids(tokenizer, "short")) <= m
    left = RLDataset(path, tokenizer, max_prompt_length=m, truncation="left")
    right = RLDataset(path, tokenizer, max_prompt_length=m, truncation="right")
    middle = RLDataset(path, tokenizer, max_prompt_length=m, truncation="middle")
    assert left[1]["input_ids"] == full[-m:]
    assert right[1]["input_ids"] == full[:m]
    assert middle[1]["input_ids"] == full[:m // 2] + full[-(m - m // 2):]
    assert left.num_truncated == 1 and left[0]["input_ids"] == expected_ids(tokenizer, "short")


def test_truncation_error_names_row_and_fixes(tmp_path, tokenizer):
    path = write_jsonl(_long_rows(), tmp_path / "long.jsonl")
    n = len(expected_ids(tokenizer, LONG))
    with pytest.raises(DataError) as e:
        RLDataset(path, tokenizer, max_prompt_length=n - 1)
    msg = str(e.value)
    assert "row 1" in msg and f"{n} tokens" in msg and f"max_prompt_length={n - 1}" in msg
    for fix in ("data.max_prompt_length", "data.filter_overlong_prompts=True", "data.truncation=left"):
        assert fix in msg
    assert len(RLDataset(path, tokenizer, max_prompt_length=n)) == 2  # exactly at the limit is fine
    with pytest.raises(DataError, match="data.truncation"):
        RLDataset(path, tokenizer, truncation="sideways")


def test_filter_overlong_prompts_counts(tmp_path, tokenizer, caplog):
    rows = make_rows(5)
    rows[1]["prompt"][0]["content"] = LONG
    rows[3]["prompt"][0]["content"] = LONG + " " + LONG
    path = write_jsonl(rows, tmp_path / "mixed.jsonl")
    limit = len(expected_ids(tokenizer, LONG)) - 1
    with caplog.at_level(logging.INFO, logger="engine.data.dataset"):
        ds = RLDataset(path, tokenizer, max_prompt_length=limit, filter_overlong_prompts=True)
    assert len(ds) == 3 and ds.num_filtered == 2
    assert [ds[i]["prompt_index"] for i in range(3)] == [100, 102, 104]
    assert "filtered 2 of 5" in caplog.text
    assert RLDataset(path, tokenizer, max_prompt_length=10_000, filter_overlong_prompts=True).num_filtered == 0


# ---- collate ---------------------------------------------------------------------------------------
def test_collate_left_pads(tokenizer):
    items = [{"input_ids": [5, 6, 7], "data_source": "a", "prompt_index": 0},
             {"input_ids": [8], "data_source": "b", "prompt_index": 1}]
    b = collate(items, pad_token_id=0)
    assert b["input_ids"].dtype == torch.long
    assert b["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert b["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert b["position_ids"].tolist() == [[0, 1, 2], [0, 0, 0]]
    assert list(b.meta["data_source"]) == ["a", "b"] and "input_ids" not in b.meta
    wide = collate(items, pad_token_id=9, pad_to=5)
    assert wide["input_ids"].tolist() == [[9, 9, 5, 6, 7], [9, 9, 9, 9, 8]]
    assert wide["position_ids"].tolist() == [[0, 0, 0, 1, 2], [0, 0, 0, 0, 0]]
    with pytest.raises(DataError, match="pad_to"):
        collate(items, 0, pad_to=2)


def test_collate_dataset_items_meta(tmp_path, tokenizer):
    ds = RLDataset(write_jsonl(make_rows(3), tmp_path / "d.jsonl"), tokenizer)
    b = collate([ds[0], ds[2]], ds.pad_token_id)
    assert set(b.meta) == {"data_source", "ground_truth", "raw_prompt", "prompt_text", "extra_info", "ability",
                           "prompt_index", "reward_style"}
    assert list(b.meta["ground_truth"]) == ["0", "4"]
    assert b.meta["raw_prompt"][1] == [{"role": "user", "content": "What is 2 + 2?"}]
    assert b["input_ids"].shape == b["attention_mask"].shape == b["position_ids"].shape


# ---- PromptLoader ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ten(tmp_path_factory, tokenizer):
    path = write_jsonl(make_rows(10), tmp_path_factory.mktemp("ten") / "ten.jsonl")
    return RLDataset(path, tokenizer)


def _ids(batch) -> list[int]:
    return [int(i) for i in batch.meta["prompt_index"]]


def test_loader_epochs_cover_dataset_and_reproduce(ten):
    loader = PromptLoader(ten, batch_size=3, seed=7)
    assert len(loader) == loader.steps_per_epoch == 3
    epoch0 = [_ids(b) for b in loader]
    epoch1 = [_ids(b) for b in loader]
    assert len(epoch0) == len(epoch1) == 3
    assert all(len({i for b in ep for i in b}) == 9 for ep in (epoch0, epoch1))
    assert epoch0 != epoch1  # a new permutation per epoch
    again = PromptLoader(ten, batch_size=3, seed=7)
    assert [_ids(next(again)) for _ in range(6)] == epoch0 + epoch1
    assert [_ids(b) for b in PromptLoader(ten, 3, seed=8)] != epoch0
    assert [_ids(b) for b in PromptLoader(ten, 5, shuffle=False)] == [[100, 101, 102, 103, 104],
                                                                      [105, 106, 107, 108, 109]]


def test_loader_resume_mid_epoch(ten):
    ref = PromptLoader(ten, batch_size=3, seed=3)
    stream = [_ids(next(ref)) for _ in range(8)]
    a = PromptLoader(ten, batch_size=3, seed=3)
    for _ in range(4):
        next(a)
    state = a.state_dict()
    assert state == {"epoch": 1, "position": 1}
    b = PromptLoader(ten, batch_size=3, seed=3)
    b.load_state_dict(json.loads(json.dumps(state)))
    assert [_ids(next(b)) for _ in range(4)] == stream[4:]


def test_loader_resume_at_epoch_end_no_skip_no_repeat(ten):
    ref = PromptLoader(ten, batch_size=3, seed=5)
    epoch0 = [_ids(b) for b in ref]
    epoch1 = [_ids(b) for b in ref]
    a = PromptLoader(ten, batch_size=3, seed=5)
    assert [_ids(b) for b in a] == epoch0
    state = a.state_dict()
    assert state == {"epoch": 0, "position": 3}  # taken right at the end of epoch 0
    b = PromptLoader(ten, batch_size=3, seed=5)
    b.load_state_dict(state)
    first = next(b)
    assert _ids(first) == epoch1[0] and first.info["epoch"] == 1
    assert b.state_dict() == {"epoch": 1, "position": 1}
    c = PromptLoader(ten, batch_size=3, seed=5)
    c.load_state_dict(state)
    assert [_ids(x) for x in c] == epoch1  # iterating after the restore yields exactly epoch 1


def test_loader_drop_last_false_and_errors(ten):
    loader = PromptLoader(ten, batch_size=4, drop_last=False, shuffle=False)
    assert len(loader) == 3
    assert [len(b) for b in loader] == [4, 4, 2]
    with pytest.raises(DataError) as e:
        PromptLoader(ten, batch_size=11)
    assert "data.train_batch_size=11" in str(e.value) and "10 prompts" in str(e.value)
    with pytest.raises(DataError, match="checkpoint"):
        loader.load_state_dict({"epoch": 0, "position": 4})
