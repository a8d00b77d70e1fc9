"""Fixed benchmark workloads: model, batch shape, algorithm settings; and what is shared by every implementation
that runs them (the random model directory, the synthetic prompts, the reward)."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import zlib

import torch


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    arch: str                 # engine.models.random architecture
    prompts: int              # prompts per step
    n: int                    # samples per prompt (GRPO group)
    prompt_len: int           # exact prompt tokens (synthetic prompts); the longest allowed (GSM8K prompts)
    response_len: int         # exact response tokens (min = max new tokens); the cap when eos_rate > 0
    micro: int                # sequences per forward/backward (TRL: per_device_train_batch_size)
    kl_coef: float = 0.04     # reference KL loss weight (TRL's beta)
    lr: float = 1e-6
    eos_rate: float = 0.0     # > 0: the model ends answers with this probability per token (engine.models.random)
    prompt_source: str = "random"  # "random": uniform ASCII ids; "gsm8k": GSM8K questions in the chat format

    @property
    def sequences(self) -> int:
        return self.prompts * self.n


WORKLOADS = {
    # W1 (tracker issue 6): Qwen2.5-0.5B shapes, 64 x 8 = 512 sequences of 256 + 256 tokens, micro-batch 32.
    "w1": Workload("w1", "qwen2.5-0.5b", prompts=64, n=8, prompt_len=256, response_len=256, micro=32),
    # W2 (issue 13): W1's model and batch, GSM8K prompts (byte tokens: 173-841, mean ~330), answers ending at
    # the end token with probability 1/200 per token (geometric: mean ~200, a few at the 1,024 cap).
    "w2": Workload("w2", "qwen2.5-0.5b", prompts=64, n=8, prompt_len=1024, response_len=1024, micro=32,
                   eos_rate=0.005, prompt_source="gsm8k"),
    # The same step on toy shapes (Qwen's vocabulary, a 2-layer body): for CPU tests of the bench itself.
    "tiny": Workload("tiny", "tiny-qwen2", prompts=4, n=2, prompt_len=16, response_len=8, micro=4),
    # ...and W2's on toy shapes: GSM8K prompts, answers ending early (compaction of the static decoder).
    "tiny-w2": Workload("tiny-w2", "tiny-qwen2", prompts=4, n=2, prompt_len=1024, response_len=24, micro=4,
                        eos_rate=0.08, prompt_source="gsm8k"),
}


def sync(device: str) -> None:
    """Wait for the GPU's queued work before reading a clock (nothing to wait for on CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


def model_dir(workload: Workload, root: str | None = None) -> str:
    """The random-init model of the workload's architecture (built once, then reused from the cache)."""
    from engine.builtins import cache_dir
    from engine.models.random import FACTS_FILE, build_random_model

    root = root or os.path.join(cache_dir(), "bench-models")
    # "-v2": the end-token channel of engine.models.random changed (constant 1.0, calibrated after chat prompts)
    name = workload.arch + (f"-eos{workload.eos_rate:g}-v2" if workload.eos_rate > 0 else "")
    path = os.path.join(root, name)
    if not os.path.exists(os.path.join(path, FACTS_FILE)):
        build_random_model(workload.arch, path, dtype="bfloat16", seed=0, eos_rate=workload.eos_rate)
    return path


def gsm8k_questions(count: int) -> list[str]:
    """The first `count` GSM8K training questions + verl's instruction (engine.data.gsm8k's prompt text), from
    train.jsonl in `RLSTUDIO_GSM8K` (`--gsm8k DIR`), else in shared/data/gsm8k beside the checkout
    (engine.data.gsm8k.local_dir). Absent: synthetic questions whose byte lengths follow GSM8K's (mean ~250,
    80-750), with a message saying so."""
    from engine.data.gsm8k import INSTRUCTION, local_dir, local_dir_missing

    directory = local_dir(["train.jsonl"])
    if directory is not None:
        path = directory / "train.jsonl"
        out = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    out.append(json.loads(line)["question"] + " " + INSTRUCTION)
                if len(out) == count:
                    return out
        return (out * (count // max(len(out), 1) + 1))[:count]
    print(f"[bench] {local_dir_missing(['train.jsonl'])} (or pass --gsm8k DIR): using synthetic prompts with "
          "GSM8K-like lengths instead", file=sys.stderr, flush=True)
    generator = torch.Generator().manual_seed(0)
    lengths = (torch.randn(count, generator=generator) * 90 + 250).clamp(80, 750).long()
    return ["".join(chr(ord("a") + int(c)) for c in torch.randint(0, 26, (int(n),), generator=generator))
            + " " + INSTRUCTION for n in lengths]


def prompt_texts(workload: Workload, tokenizer, step: int) -> list[str]:
    """Step `step`'s prompts as text in the model's chat format (prompt_source "gsm8k"), the same for every
    implementation; prompts longer than `prompt_len` tokens are skipped."""
    questions = gsm8k_questions(workload.prompts * (step + 1) * 2)
    texts = []
    for q in questions:
        text = tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                             add_generation_prompt=True)
        if len(tokenizer(text)["input_ids"]) <= workload.prompt_len:
            texts.append(text)
    return texts[step * workload.prompts:(step + 1) * workload.prompts]


def length_histogram(lengths: list[int], cap: int) -> dict:
    """Counts of response lengths in bins (doubling widths up to the cap, the cap on its own) + summary."""
    edges = [e for e in (1, 33, 65, 129, 257, 513) if e < cap] + [cap]
    bins = {}
    for lo, hi in zip(edges, edges[1:]):
        bins[f"{lo}-{hi - 1}"] = sum(lo <= n < hi for n in lengths)
    bins[f"{cap} (cap)"] = sum(n >= cap for n in lengths)
    ordered = sorted(lengths)
    return {"bins": bins, "mean": round(sum(lengths) / max(len(lengths), 1), 1),
            "median": ordered[len(ordered) // 2] if ordered else None,
            "p90": ordered[int(len(ordered) * 0.9)] if ordered else None, "count": len(lengths)}


def prompt_token_ids(workload: Workload, vocab_size: int, seed: int = 0) -> torch.Tensor:
    """[prompts, prompt_len] token ids drawn uniformly from the ordinary (non-special) vocabulary."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (workload.prompts, workload.prompt_len), generator=generator)


def bench_score(data_source=None, solution_str: str = "", ground_truth=None, extra_info=None, **_) -> float:
    """A cheap deterministic pseudo-random reward in [0, 1) of the answer text: random weights give random
    answers, and GRPO needs rewards that differ within a group so that advantages are not all zero."""
    return (zlib.crc32(solution_str.encode("utf-8", "replace")) % 1000) / 1000.0
