import json
import re
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine.data.arith import make_arith_rows
from engine.models.tiny import (
    ASSETS_DIR,
    TEST_QUESTIONS,
    TRAIN_QUESTIONS,
    VAL_QUESTIONS,
    build_tiny_model,
    ensure_tiny_model,
    main,
)
from engine.reward.arith import compute_score


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_dir):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_dir).eval(), AutoTokenizer.from_pretrained(tiny_dir)


def test_shipped_model_is_a_small_plain_qwen2_checkpoint(tiny_dir, model_and_tokenizer):
    model, tok = model_and_tokenizer
    files = {p.name: p.stat().st_size for p in tiny_dir.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= files.keys()
    assert sum(files.values()) <= 10 * 2**20
    with safe_open(tiny_dir / "model.safetensors", "pt") as f:
        names = f.keys()
        assert names and all(f.get_slice(k).get_dtype() == "F32" for k in names)
    c = model.config
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.dtype == torch.float32
    assert c.head_dim >= 32 and c.hidden_size == 128 and c.num_hidden_layers == 2 and c.tie_word_embeddings
    assert c.vocab_size >= len(tok) and c.vocab_size % 8 == 0
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token_id == c.eos_token_id == model.generation_config.eos_token_id == im_end
    assert model.generation_config.pad_token_id == tok.pad_token_id


def generate(model, tok, questions, **sampling):
    tok.padding_side = "left"
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
               for q in questions]
    batch = tok(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=8, **sampling)
    return out[:, batch["input_ids"].shape[1]:]


def test_greedy_answer_is_a_number_then_end_token(model_and_tokenizer):
    model, tok = model_and_tokenizer
    new_tokens = generate(model, tok, ["82+53=?", "12-53=?"], do_sample=False)
    for row in new_tokens:
        text = tok.decode(row)  # keeps specials; padding after the end token is <|endoftext|>
        assert re.fullmatch(r"-?\d+<\|im_end\|>(<\|endoftext\|>)*", text), text


def test_greedy_accuracy_on_the_test_split_leaves_room_for_rl(model_and_tokenizer):
    model, tok = model_and_tokenizer
    rows = make_arith_rows(200, seed=0, split="test")
    responses = tok.batch_decode(generate(model, tok, [r["extra_info"]["question"] for r in rows], do_sample=False),
                                 skip_special_tokens=True)
    acc = sum(compute_score(resp, r["reward_model"]["ground_truth"]) for resp, r in zip(responses, rows)) / len(rows)
    assert 0.10 <= acc <= 0.60, acc


def test_build_facts_are_recorded(tiny_dir, model_and_tokenizer):
    facts = json.loads((tiny_dir / "rlstudio_tiny.json").read_text())
    assert facts["val_greedy_accuracy"] >= facts["target_val_accuracy"] == 0.30
    assert facts["test_questions"] == TEST_QUESTIONS
    assert 0.15 <= facts["test_sampled_accuracy_t1"] <= facts["test_greedy_accuracy"] <= 0.50
    assert facts["num_parameters"] == model_and_tokenizer[0].num_parameters()


def test_warm_start_data_is_disjoint_from_validation_and_test():
    rows = make_arith_rows(TRAIN_QUESTIONS + VAL_QUESTIONS, seed=0, split="train")
    sft = {r["extra_info"]["question"] for r in rows[:TRAIN_QUESTIONS]}
    val = {r["extra_info"]["question"] for r in rows[TRAIN_QUESTIONS:]}
    test = {r["extra_info"]["question"] for r in make_arith_rows(TEST_QUESTIONS, seed=0, split="test")}
    assert len(val) == VAL_QUESTIONS and not (sft & val) and not (sft & test) and not (val & test)


def test_ensure_copies_to_the_cache_and_repairs(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSTUDIO_CACHE", str(tmp_path))
    path = Path(ensure_tiny_model())
    assert path == tmp_path / "tiny-model"
    config = path / "config.json"
    config.write_text("{}")
    assert ensure_tiny_model() == str(path)
    assert config.read_bytes() == (ASSETS_DIR / "config.json").read_bytes()


def test_cli_copies_the_shipped_model(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "m")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "m")
    assert (tmp_path / "m" / "model.safetensors").read_bytes() == (ASSETS_DIR / "model.safetensors").read_bytes()


def test_build_pipeline_stops_at_the_target_and_is_deterministic(tmp_path):
    # target 0 stops at the first evaluation: the whole build path in a few seconds
    kwargs = {"target_accuracy": 0.0, "eval_every": 1, "test_questions": 20, "log": lambda msg: None}
    facts = build_tiny_model(tmp_path / "a", seed=1, **kwargs)
    build_tiny_model(tmp_path / "b", seed=1, **kwargs)
    assert facts["steps"] == 1
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    assert model.config.head_dim == 64 and AutoTokenizer.from_pretrained(tmp_path / "a").eos_token == "<|im_end|>"

    with pytest.raises(RuntimeError, match="validation accuracy"):
        build_tiny_model(tmp_path / "c", target_accuracy=0.99, max_steps=1, eval_every=1, test_questions=20,
                         log=lambda msg: None)
