"""The tool-use warm start: the built-in tiny model, shown the calculator's call format on a few trajectories.

    python -m engine.models.tiny_calc --out DIR              # copy the shipped model (engine/models/tiny_calc_assets)
    python -m engine.models.tiny_calc --out DIR --rebuild    # build it from the tiny model (~950 steps, 2.5-5 min)

The shipped files are this script's output (`--rebuild --out engine/models/tiny_calc_assets`; a rebuild gives the
same weights, byte for byte).

The task is three-digit multiplication ("123*456=?" -> "56088", data_source "arith_tool"): far beyond what a
2-layer, 0.36M-parameter model can do in its head, and easy with the calculator, in the compact call format
(engine/rollout/formats.py): `<c>123*456</c>` ends the model's turn, the tool answers `=56088\\n`, the model
copies the result and stops: `<c>123*456</c>=56088\\n56088<|im_end|>`.

The warm start is a short supervised pass from the tiny arithmetic model (engine/models/tiny.py) on synthetic
trajectories made here: a few in ten (`tool_fraction`) use the calculator, the rest answer the product directly, as
a model without a tool would try to. The tool's answer is context, not a target (no loss on it), as in RL. So the
model has seen the call format, calls the tool on a minority of questions and otherwise guesses (and is then
almost always wrong): GRPO with the calculator (preset `calculator_tool_use`) has to learn to use the tool. The
build stops once it evaluates as a warm start should (multi-turn, sampled at temperature 1 with the real
calculator, on questions it did not train on): its tool calls mostly work, but few answers use the tool.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase, Qwen2ForCausalLM

from engine.data.arith import make_arith_rows
from engine.models.tiny import ASSETS_DIR as TINY_ASSETS
from engine.models.tiny import cache_root, copy_shipped_assets, prompt_ids, save_built
from engine.models.tokenizer import IM_END, build_char_tokenizer

ASSETS_DIR = Path(__file__).resolve().parent / "tiny_calc_assets"
FACTS_FILE = "rlstudio_tiny_calc.json"
DATA_SOURCE = "arith_tool"
TOOL_CONFIG = "builtin:tools/calculator.yaml"   # tag c: <c>EXPRESSION</c>
QUESTIONS = {"max_operand": 999, "min_operand": 100, "ops": "*", "data_source": DATA_SOURCE}
TRAIN_QUESTIONS = 4000   # the warm start's questions: the first of the arith_tool train split (RL sees more)
VAL_QUESTIONS = 200      # the next train-pool questions, for the stopping rule
TEST_QUESTIONS = 1000
RESPONSE_LENGTH = 32     # call (14 tokens) + answer (7) + result (6) + end token, with room


def calc_rows(n: int, split: str, seed: int = 0) -> list[dict]:
    return make_arith_rows(n, seed=seed, split=split, **QUESTIONS)


def prepare_calc_data(local_dir: str | os.PathLike, train_size: int = 20000, test_size: int = 1000) -> dict:
    from engine.data.arith import prepare_arith

    return prepare_arith(local_dir, train_size=train_size, test_size=test_size, seed=0, **QUESTIONS)


def trajectory(question: str, answer: str, use_tool: bool) -> list[tuple[str, bool]]:
    """The response as (text, trained-on) pieces: with the tool, the call, the calculator's answer (context) and
    the result; without, the product directly."""
    if not use_tool:
        return [(answer, True)]
    expression = question.removesuffix("=?")
    return [(f"<c>{expression}</c>", True), (f"={answer}\n", False), (answer, True)]


def sft_tensors(tokenizer: PreTrainedTokenizerBase, rows: list[dict], tool_fraction: float,
                seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and labels (-100 on the prompt, the tool's answer and padding), right-padded."""
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    pick = random.Random(seed)
    prompts = prompt_ids(tokenizer, [r["extra_info"]["question"] for r in rows])
    seqs, labels = [], []
    for prompt, row in zip(prompts, rows):
        info = row["extra_info"]
        seq, lab = list(prompt), [-100] * len(prompt)
        for text, trained in trajectory(info["question"], info["answer"], pick.random() < tool_fraction):
            ids = tokenizer.encode(text, add_special_tokens=False)
            seq += ids
            lab += ids if trained else [-100] * len(ids)
        seqs.append(seq + [im_end])
        labels.append(lab + [im_end])
    width = max(map(len, seqs))
    pad = tokenizer.pad_token_id
    return (torch.tensor([s + [pad] * (width - len(s)) for s in seqs]),
            torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels]))


def agent_rollout(model, tokenizer, sample: bool):
    """The engine's own multi-turn rollout (agent loop around the hf rollout) with the calculator."""
    from engine.config.schema import MultiTurnConfig, RolloutConfig, ValKwargs
    from engine.rollout.agent_loop import AgentLoopRollout
    from engine.rollout.hf_rollout import HFRollout, eos_ids
    from engine.tools.registry import load_tools

    cfg = RolloutConfig(name="hf", response_length=RESPONSE_LENGTH, temperature=1.0, do_sample=True,
                        val_kwargs=ValKwargs(do_sample=sample, temperature=1.0 if sample else 0.0),
                        multi_turn=MultiTurnConfig(enable=True, format="compact", max_assistant_turns=3,
                                                   tool_config_path=TOOL_CONFIG))
    inner = HFRollout(model, tokenizer, cfg, "cpu")
    return AgentLoopRollout(inner, tokenizer, cfg, load_tools(TOOL_CONFIG), inner.pad_id, eos_ids(model, tokenizer))


@torch.no_grad()
def evaluate(model, tokenizer, rows: list[dict], sample: bool = False, batch_size: int = 500) -> dict[str, float]:
    """Multi-turn answers with the real calculator: accuracy (the arith_tool reward), the fraction of answers that
    called the tool, and the accuracy of those that did."""
    from engine.protocol import Batch
    from engine.reward.arith_tool import compute_score

    was_training = model.training
    rollout = agent_rollout(model, tokenizer, sample)
    correct = used = used_correct = 0
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        ids = prompt_ids(tokenizer, [r["extra_info"]["question"] for r in chunk])
        width = max(map(len, ids))
        input_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in ids])
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ids])
        out = rollout.generate(Batch({"input_ids": input_ids, "attention_mask": attention,
                                      "position_ids": (attention.cumsum(-1) - 1).clamp(min=0)}), validate=True)
        lengths = (out["attention_mask"][:, width:] * torch.arange(1, RESPONSE_LENGTH + 1)).max(-1).values
        for i, row in enumerate(chunk):
            text = tokenizer.decode(out["responses"][i, :lengths[i]].tolist(), skip_special_tokens=True)
            score = compute_score(text, row["reward_model"]["ground_truth"])
            calls = any(t["role"] == "tool" for t in out.meta["turns"][i])
            correct += score
            used += calls
            used_correct += score * calls
    model.train(was_training)
    n = len(rows)
    return {"accuracy": correct / n, "tool_use_fraction": used / n,
            "accuracy_with_tool": used_correct / used if used else 0.0}


def done(val: dict[str, float], min_tool_accuracy: float) -> bool:
    """The stopping rule: answers that call the tool are right often enough (and some do, unless the bar is 0)."""
    return val["accuracy_with_tool"] >= min_tool_accuracy and (val["tool_use_fraction"] > 0 or min_tool_accuracy <= 0)


def build_tiny_calc_model(out_dir: str | os.PathLike, seed: int = 0, tool_fraction: float = 0.2, lr: float = 1e-3,
                          batch_size: int = 64, eval_every: int = 25, min_tool_accuracy: float = 0.8,
                          max_steps: int = 2000, num_threads: int = 1, test_questions: int = TEST_QUESTIONS,
                          log=print) -> dict:
    """Builds the warm start into out_dir and returns the facts it records. It stops at the first evaluation
    (sampled, as RL samples) where answers that call the tool are right at least `min_tool_accuracy` of the time:
    the call format is learned; how often to call is left to RL."""
    started, cpu_started = time.time(), time.process_time()
    threads_before = torch.get_num_threads()
    torch.set_num_threads(num_threads)  # fixed, so that a rebuild gives the same weights
    try:
        torch.manual_seed(seed)
        tokenizer = build_char_tokenizer()
        model = Qwen2ForCausalLM.from_pretrained(TINY_ASSETS, dtype=torch.float32)
        rows = calc_rows(TRAIN_QUESTIONS + VAL_QUESTIONS, "train")
        train_rows, val_rows = rows[:TRAIN_QUESTIONS], rows[TRAIN_QUESTIONS:]
        input_ids, labels = sft_tensors(tokenizer, train_rows, tool_fraction, seed)
        order = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)

        model.train()
        step, val, permutation = 0, {}, torch.empty(0, dtype=torch.long)
        while step < max_steps:
            if len(permutation) < batch_size:
                permutation = torch.randperm(len(input_ids), generator=order)
            idx, permutation = permutation[:batch_size], permutation[batch_size:]
            loss = model(input_ids=input_ids[idx], labels=labels[idx]).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % eval_every == 0:
                torch.manual_seed(seed + step)
                val = evaluate(model, tokenizer, val_rows, sample=True)
                log(f"step {step}: loss {loss.item():.3f}, validation (sampled) {json.dumps(val)}")
                if done(val, min_tool_accuracy):
                    break
        if not val or not done(val, min_tool_accuracy):
            raise RuntimeError(f"warm start stopped at {max_steps} steps with {val}; try another seed")

        test_rows = calc_rows(test_questions, "test")
        test_greedy = evaluate(model, tokenizer, test_rows)
        torch.manual_seed(seed)
        test_sampled = evaluate(model, tokenizer, test_rows, sample=True)

        facts = {
            "seed": seed, "steps": step, "lr": lr, "batch_size": batch_size, "tool_fraction": tool_fraction,
            "num_threads": num_threads, "train_questions": TRAIN_QUESTIONS, "val_questions": VAL_QUESTIONS,
            "min_tool_accuracy": min_tool_accuracy, "val_sampled": val,
            "test_questions": test_questions, "test_greedy": test_greedy, "test_sampled_t1": test_sampled,
            "build_seconds": round(time.time() - started, 1),
            "build_cpu_seconds": round(time.process_time() - cpu_started, 1),
            "torch_version": torch.__version__,
        }
        save_built(model, tokenizer, out_dir, FACTS_FILE, facts)
        log(f"built: {json.dumps(facts)}")
        return facts
    finally:
        torch.set_num_threads(threads_before)


def ensure_tiny_calc_model(dir: str | os.PathLike | None = None) -> str:
    """A directory holding the shipped warm start (copied there if missing or stale); returns its path.
    Default: $RLSTUDIO_CACHE/tiny-calc-model."""
    target = Path(os.path.expanduser(str(dir))) if dir is not None else cache_root() / "tiny-calc-model"
    return copy_shipped_assets(ASSETS_DIR, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.models.tiny_calc", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory to write the model to")
    parser.add_argument("--rebuild", action="store_true", help="build from the tiny model instead of copying")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tool-fraction", type=float, default=0.2, help="with --rebuild: share of trajectories "
                        "that call the calculator in the supervised data")
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args(argv)
    if args.rebuild:
        build_tiny_calc_model(args.out, seed=args.seed, tool_fraction=args.tool_fraction, lr=args.lr)
    else:
        print(ensure_tiny_calc_model(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
