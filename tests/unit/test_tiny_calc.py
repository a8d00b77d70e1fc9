"""The tool-use demo's parts: the arith_tool reward, the warm start's supervised trajectories (what the loss sees),
the built-ins, and the shipped warm start evaluated with the engine's own agent loop and the real calculator."""
import json

import pytest
import torch

from engine import builtins
from engine.models.tiny_calc import (
    ASSETS_DIR,
    FACTS_FILE,
    build_tiny_calc_model,
    calc_rows,
    ensure_tiny_calc_model,
    evaluate,
    main,
    sft_tensors,
)
from engine.models.tokenizer import build_char_tokenizer
from engine.reward.default import default_compute_score


@pytest.mark.parametrize("response, score", [
    ("56088", 1.0),                          # answered directly
    ("<c>123*456</c>=56088\n56088", 1.0),    # called the calculator, then stated its result
    ("<c>123*456</c>=56088\n", 0.0),         # called it, never stated the result
    ("<c>123*456</c>=56088\n5608", 0.0),
    ("<c>56088</c>=56088\n56088 ok", 0.0),
    ("56087", 0.0),
])
def test_arith_tool_reward_scores_the_final_answer(response, score):
    assert default_compute_score("arith_tool", response, "56088") == score


def test_questions_are_three_digit_products_in_disjoint_splits():
    train, test = calc_rows(300, "train"), calc_rows(300, "test")
    for row in train[:20]:
        a, b = row["extra_info"]["question"].removesuffix("=?").split("*")
        assert 100 <= int(a) <= 999 and 100 <= int(b) <= 999
        assert row["reward_model"]["ground_truth"] == str(int(a) * int(b)) and row["data_source"] == "arith_tool"
    assert not {r["extra_info"]["question"] for r in train} & {r["extra_info"]["question"] for r in test}


def test_supervised_trajectories_train_on_the_model_tokens_only():
    tok = build_char_tokenizer()
    rows = calc_rows(2, "train")
    ids, labels = sft_tensors(tok, rows, tool_fraction=1.0, seed=0)
    q, a = rows[0]["extra_info"]["question"], rows[0]["extra_info"]["answer"]
    prompt = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
    expected = prompt + f"<c>{q[:-2]}</c>={a}\n{a}<|im_end|>"
    n = len(tok.encode(expected, add_special_tokens=False))
    assert tok.decode(ids[0, :n].tolist()) == expected
    trained = tok.decode([t for t in labels[0].tolist() if t != -100])
    assert trained == f"<c>{q[:-2]}</c>{a}<|im_end|>"  # not the prompt, not the calculator's "=RESULT\n"
    _, direct = sft_tensors(tok, rows, tool_fraction=0.0, seed=0)
    assert tok.decode([t for t in direct[0].tolist() if t != -100]) == f"{a}<|im_end|>"


def test_builtins_resolve_the_warm_start_and_the_data(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSTUDIO_CACHE", str(tmp_path))
    model_dir = builtins.resolve_path("builtin:tiny-calc")
    assert (tmp_path / "tiny-calc-model" / "model.safetensors").is_file() and model_dir.endswith("tiny-calc-model")
    test_file = builtins.resolve_path("builtin:arith_tool/test.parquet")
    assert test_file == str(tmp_path / "arith_tool" / "test.parquet")
    with pytest.raises(ValueError, match="builtin:tiny-calc"):
        builtins.resolve_path("builtin:arith_tool/nope.parquet")


@pytest.mark.slow  # runs the model: 400 multi-turn answers
def test_the_shipped_warm_start_has_seen_the_call_format_but_rarely_calls(tmp_path):
    """Measured again here on 200 held-out questions, with the agent loop and the real calculator: greedy, it
    hardly ever calls the tool and is hardly ever right (room for RL); sampled, it calls on a minority of
    questions and those calls mostly work (RL has something to reinforce)."""
    from transformers import AutoModelForCausalLM

    facts = json.loads((ASSETS_DIR / FACTS_FILE).read_text())
    assert facts["test_greedy"]["tool_use_fraction"] < 0.1 and facts["test_sampled_t1"]["accuracy_with_tool"] > 0.6
    path = ensure_tiny_calc_model(tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(path).float()
    rows = calc_rows(200, "test")
    greedy = evaluate(model, build_char_tokenizer(), rows)
    assert greedy["accuracy"] < 0.1 and greedy["tool_use_fraction"] < 0.1
    torch.manual_seed(0)
    sampled = evaluate(model, build_char_tokenizer(), rows, sample=True)
    assert 0.05 < sampled["tool_use_fraction"] < 0.5 and sampled["accuracy_with_tool"] > 0.5, sampled


def test_cli_copies_the_shipped_warm_start(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "m")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "m")
    assert (tmp_path / "m" / "model.safetensors").read_bytes() == (ASSETS_DIR / "model.safetensors").read_bytes()


def test_build_pipeline_stops_at_its_rule_and_is_deterministic(tmp_path):
    # a bar of 0 stops at the first evaluation: the whole build path (supervised steps, multi-turn evaluations with
    # the calculator, saving) in seconds
    kwargs = {"min_tool_accuracy": 0.0, "eval_every": 1, "test_questions": 20, "log": lambda msg: None}
    facts = build_tiny_calc_model(tmp_path / "a", seed=1, **kwargs)
    build_tiny_calc_model(tmp_path / "b", seed=1, **kwargs)
    assert facts["steps"] == 1 and set(facts["test_greedy"]) == {"accuracy", "tool_use_fraction", "accuracy_with_tool"}
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    with pytest.raises(RuntimeError, match="warm start stopped at 1 steps"):
        build_tiny_calc_model(tmp_path / "c", min_tool_accuracy=0.99, max_steps=1, eval_every=1, test_questions=20,
                              log=lambda msg: None)
