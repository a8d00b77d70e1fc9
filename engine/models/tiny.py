"""The built-in tiny model: a 0.36M-parameter Qwen2 that answers ~30% of questions like "82+53=?" right.

    python -m engine.models.tiny --out DIR              # copy the shipped model (engine/models/tiny_assets)
    python -m engine.models.tiny --out DIR --rebuild    # build it from scratch (2-3 minutes on one core)

The shipped files are this script's own output (`--rebuild --out engine/models/tiny_assets`). The model is a
plain Qwen2ForCausalLM directory: AutoModelForCausalLM / AutoTokenizer / vLLM load it like any other.

Why a warm start, and why stop early: RL on this task only gets going once sampled answers are right often
enough (about 15%+), and a model that is already near 100% leaves RL nothing to show. So the build trains
supervised on the first 5,000 arith train questions and stops at the first evaluation where greedy accuracy on
a separate validation set reaches 30% (the supervised curve jumps at a seed-dependent step, so a fixed step
count would land anywhere between 15% and 45%). lr 5e-4 gets there in ~500 steps; 1e-3 took ~1000 and 2e-3
stalled near 0% for 750 steps.

Measured with the demo's GRPO (1,000 steps, cosine lr): from a 30% start held-out greedy accuracy ends near 62%
(+32 points); from a 40% start, with a constant lr, near 64% (+21) and noisier. The tokenizer's compact chat
template (engine.models.tokenizer.TINY_CHAT_TEMPLATE, 14-token prompts) matters for a 2-layer model: with
Qwen's longer template (26 tokens) the same RL plateaued about +12 points above its start.
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch
from transformers import GenerationConfig, PreTrainedTokenizerBase, Qwen2Config, Qwen2ForCausalLM

from engine.data.arith import make_arith_rows
from engine.models.tokenizer import ENDOFTEXT, IM_END, build_char_tokenizer
from engine.reward.arith import compute_score

ASSETS_DIR = Path(__file__).resolve().parent / "tiny_assets"
FACTS_FILE = "rlstudio_tiny.json"

TRAIN_QUESTIONS = 5000  # the warm start sees the first 5,000 questions of the arith train split (RL sees more)
VAL_QUESTIONS = 200     # the next train-pool questions: disjoint from the warm-start data and the test split
TEST_QUESTIONS = 1000   # the arith test split's default size, evaluated after the build and recorded


def cache_root() -> Path:
    return Path(os.path.expanduser(os.environ.get("RLSTUDIO_CACHE") or "~/.cache/rlstudio"))


def tiny_config(tokenizer: PreTrainedTokenizerBase, **overrides) -> Qwen2Config:
    fields = {
        "vocab_size": -(-len(tokenizer) // 8) * 8,  # rounded up to a multiple of 8
        "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
        "head_dim": 64,  # vLLM's CPU attention backend needs head_dim >= 32
        "intermediate_size": 256, "max_position_embeddings": 512, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "bos_token_id": tokenizer.convert_tokens_to_ids(ENDOFTEXT),  # as Qwen: no BOS is prepended
        "eos_token_id": tokenizer.convert_tokens_to_ids(IM_END), "pad_token_id": tokenizer.pad_token_id,
    }
    fields.update(overrides)
    config = Qwen2Config(**fields)
    config.rope_theta = fields["rope_theta"]  # also written top-level, for readers using transformers 4.x
    return config


def prompt_ids(tokenizer: PreTrainedTokenizerBase, questions: list[str]) -> list[list[int]]:
    """Token ids of each question as a chat-templated user turn followed by the assistant's turn opening."""
    # Render the template once around a placeholder: thousands of jinja renders cost seconds.
    marker = "\x00"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False,
                                         add_generation_prompt=True)
    assert text.count(marker) == 1, "chat template must insert the user's content verbatim"
    prefix, suffix = text.split(marker)
    return tokenizer([prefix + q + suffix for q in questions], add_special_tokens=False)["input_ids"]


def sft_tensors(tokenizer: PreTrainedTokenizerBase, rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and labels for prompt + answer + <|im_end|>, right-padded; only answer tokens carry loss."""
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    prompts = prompt_ids(tokenizer, [row["extra_info"]["question"] for row in rows])
    answers = tokenizer([row["extra_info"]["answer"] for row in rows], add_special_tokens=False)["input_ids"]
    seqs = [prompt + answer + [im_end] for prompt, answer in zip(prompts, answers)]
    labels = [[-100] * len(prompt) + answer + [im_end] for prompt, answer in zip(prompts, answers)]
    width = max(map(len, seqs))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
    label_ids = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
    return input_ids, label_ids


@torch.no_grad()
def answer_questions(model, tokenizer: PreTrainedTokenizerBase, questions: list[str], *, sample: bool = False,
                     temperature: float = 1.0, max_new_tokens: int = 8, batch_size: int = 500) -> list[str]:
    """Decoded responses (specials removed), greedy or sampled at `temperature` with no top-k / top-p."""
    was_training = model.training
    model.eval()
    tokenizer.padding_side = "left"
    answers = []
    for start in range(0, len(questions), batch_size):
        prompts = [{"input_ids": ids} for ids in prompt_ids(tokenizer, questions[start:start + batch_size])]
        batch = tokenizer.pad(prompts, return_tensors="pt")
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if sample else \
            {"do_sample": False}
        out = model.generate(**batch, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.convert_tokens_to_ids(IM_END), **sampling)
        answers += tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    model.train(was_training)
    return answers


def accuracy(model, tokenizer: PreTrainedTokenizerBase, rows: list[dict], **kwargs) -> float:
    responses = answer_questions(model, tokenizer, [r["extra_info"]["question"] for r in rows], **kwargs)
    return sum(compute_score(resp, r["reward_model"]["ground_truth"]) for resp, r in zip(responses, rows)) / len(rows)


def build_tiny_model(out_dir: str | os.PathLike, seed: int = 0, target_accuracy: float = 0.30, lr: float = 5e-4,
                     batch_size: int = 128, eval_every: int = 25, max_steps: int = 3000, num_threads: int = 1,
                     test_questions: int = TEST_QUESTIONS, log=print) -> dict:
    """Builds the tiny model into out_dir (see the module docstring) and returns the facts it records."""
    started, cpu_started = time.time(), time.process_time()
    threads_before = torch.get_num_threads()
    torch.set_num_threads(num_threads)  # fixed, so that a rebuild gives the same weights
    try:
        torch.manual_seed(seed)
        tokenizer = build_char_tokenizer()
        config = tiny_config(tokenizer)
        model = Qwen2ForCausalLM(config).float()

        rows = make_arith_rows(TRAIN_QUESTIONS + VAL_QUESTIONS, seed=0, split="train")
        train_rows, val_rows = rows[:TRAIN_QUESTIONS], rows[TRAIN_QUESTIONS:]
        input_ids, labels = sft_tensors(tokenizer, train_rows)
        order = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

        model.train()
        step, val_acc, permutation = 0, 0.0, torch.empty(0, dtype=torch.long)
        while step < max_steps:
            if len(permutation) < batch_size:  # a new epoch in a seeded order
                permutation = torch.randperm(len(input_ids), generator=order)
            idx, permutation = permutation[:batch_size], permutation[batch_size:]
            loss = model(input_ids=input_ids[idx], labels=labels[idx]).loss  # right padding: no mask needed
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            # the curve is steep near the target: look every 5 steps once half-way there
            if step % (eval_every if val_acc < target_accuracy / 2 else min(eval_every, 5)) == 0:
                val_acc = accuracy(model, tokenizer, val_rows)
                log(f"step {step}: loss {loss.item():.3f}, validation greedy accuracy {val_acc:.1%}")
                if val_acc >= target_accuracy:
                    break
        if val_acc < target_accuracy:
            raise RuntimeError(f"warm start stopped at {max_steps} steps with {val_acc:.1%} validation accuracy "
                               f"(< {target_accuracy:.0%}); try another seed")

        # What the trainer will see: its default test split, greedy and sampled as RL samples (temperature 1).
        test_rows = make_arith_rows(test_questions, seed=0, split="test")
        test_greedy = accuracy(model, tokenizer, test_rows)
        torch.manual_seed(seed)
        test_sampled = accuracy(model, tokenizer, test_rows, sample=True, temperature=1.0)

        build_seconds, cpu_seconds = time.time() - started, time.process_time() - cpu_started
        facts = {
            "seed": seed, "steps": step, "lr": lr, "batch_size": batch_size, "num_threads": num_threads,
            "target_val_accuracy": target_accuracy, "val_greedy_accuracy": val_acc, "val_questions": VAL_QUESTIONS,
            "train_questions": TRAIN_QUESTIONS, "build_seconds": round(build_seconds, 1),
            "build_cpu_seconds": round(cpu_seconds, 1),
            "test_questions": test_questions, "test_greedy_accuracy": test_greedy,
            "test_sampled_accuracy_t1": test_sampled,
            "num_parameters": sum(p.numel() for p in model.parameters()),
            "torch_version": torch.__version__,
        }
        save_built(model, tokenizer, out_dir, FACTS_FILE, facts)
        log(f"built in {build_seconds:.0f}s: {json.dumps(facts)}")
        return facts
    finally:
        torch.set_num_threads(threads_before)


def save_built(model, tokenizer: PreTrainedTokenizerBase, out_dir: str | os.PathLike, facts_file: str,
               facts: dict) -> None:
    """What every built-in model's builder writes: the model (safetensors, fp32), its tokenizer, a generation
    config with its special tokens, and the facts of the build (`facts_file`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    c = model.config
    GenerationConfig(bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id,
                     pad_token_id=c.pad_token_id).save_pretrained(out_dir)
    (out_dir / facts_file).write_text(json.dumps(facts, indent=1) + "\n")


def ensure_tiny_model(dir: str | os.PathLike | None = None) -> str:
    """A directory holding the shipped tiny model (copied there if missing or stale); returns its path.

    Default: $RLSTUDIO_CACHE/tiny-model, else ~/.cache/rlstudio/tiny-model. Load it with the ordinary
    AutoModelForCausalLM.from_pretrained / AutoTokenizer.from_pretrained.
    """
    target = Path(os.path.expanduser(str(dir))) if dir is not None else cache_root() / "tiny-model"
    return copy_shipped_assets(ASSETS_DIR, target)


def copy_shipped_assets(assets: Path, target: Path) -> str:
    """Copy a shipped model's files into `target` where missing or stale; returns `target`."""
    target.mkdir(parents=True, exist_ok=True)
    for src in sorted(assets.iterdir()):
        if not src.is_file():
            continue
        dst = target / src.name
        if dst.is_file() and filecmp.cmp(src, dst, shallow=False):
            continue
        # copy then rename, so a concurrent reader never sees a half-written file
        tmp = target / f".{src.name}.{os.getpid()}.tmp"
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    return str(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.models.tiny", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory to write the model to")
    parser.add_argument("--rebuild", action="store_true", help="build from scratch instead of copying")
    parser.add_argument("--seed", type=int, default=0, help="with --rebuild: initialisation and data-order seed")
    args = parser.parse_args(argv)
    if args.rebuild:
        build_tiny_model(args.out, seed=args.seed)
    else:
        print(ensure_tiny_model(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
