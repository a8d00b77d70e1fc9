"""The same workload through TRL's `GRPOTrainer` (optional dependency: `pip install -e .[bench]`).

Identical model directory, prompts (as text: the byte tokenizer maps each ASCII character to one token, so
TRL tokenizes them back to the engine's ids), samples per prompt, response length (min = max new tokens),
reward, KL weight (beta), one optimizer step per generation batch of `sequences` completions in micro-batches
of `micro`. Everything else is TRL's default (gradient checkpointing on, bf16 weights, no vLLM).
"""
from __future__ import annotations

import itertools
import statistics
import tempfile
import time

import torch

from engine.bench.engine_run import ASCII_IDS
from engine.bench.workloads import Workload, bench_score, model_dir, prompt_texts, prompt_token_ids


def trl_prompts(w: Workload, tokenizer, steps: int) -> list[str]:
    texts = []
    for step in range(steps):
        if w.prompt_source == "gsm8k":  # chat-formatted text: TRL tokenizes it to the engine's ids
            texts += prompt_texts(w, tokenizer, step)
            continue
        ids = prompt_token_ids(w, ASCII_IDS, seed=step)
        texts += ["".join(chr(ord("!") + int(i)) for i in row) for row in ids]
    return texts


def _real_tokens(kwargs: dict, out: torch.Tensor, eos: int) -> tuple[int, list[int]]:
    """Prompt tokens (attention mask) and each completion's length up to and including its end token."""
    width = kwargs["input_ids"].shape[1]
    completions = out[:, width:]
    is_eos = completions == eos
    first = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, completions.shape[1])
    return int(kwargs["attention_mask"].sum()), first.tolist()


def run_trl(w: Workload, warmup: int, steps: int, device: str, log) -> dict:
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model = model_dir(w)
    total = warmup + steps
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.padding_side = "left"
    dataset = Dataset.from_dict({"prompt": trl_prompts(w, tokenizer, total)})

    def reward(completions, **_):
        return [bench_score(solution_str=c) for c in completions]

    cuda = device == "cuda"
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"), report_to="none", save_strategy="no", logging_steps=1,
        max_steps=total, learning_rate=w.lr, beta=w.kl_coef, num_iterations=1,
        num_generations=w.n, per_device_train_batch_size=w.micro,
        gradient_accumulation_steps=w.sequences // w.micro,  # one optimizer step per generation batch
        max_completion_length=w.response_len,
        generation_kwargs={} if w.eos_rate > 0 else {"min_new_tokens": w.response_len},
        temperature=1.0, top_p=1.0, shuffle_dataset=False, bf16=cuda, use_cpu=not cuda,
        model_init_kwargs={"dtype": torch.bfloat16 if cuda else torch.float32}, seed=0,
        dataloader_num_workers=0, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=dataset,
                          processing_class=tokenizer)

    gen_times: list[float] = []
    gen_tokens: list[tuple[int, list[int]]] = []  # per generate call: prompt tokens, completion lengths
    generate = trainer.model.generate

    def timed_generate(*a, **k):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = generate(*a, **k)
        if cuda:
            torch.cuda.synchronize()
        gen_times.append(time.perf_counter() - start)
        gen_tokens.append(_real_tokens(k, out, tokenizer.eos_token_id))
        return out

    trainer.model.generate = timed_generate
    step_times: list[float] = []
    step_ends: list[float] = []  # wall clock at each step's end: wall time between step ends, as the engine's
    gen_per_step: list[float] = []
    step_tokens: list[list[tuple[int, list[int]]]] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            if cuda:
                torch.cuda.synchronize()
            self.start, self.gen_before = time.perf_counter(), len(gen_times)
            self.tokens_before = len(gen_tokens)

        def on_step_end(self, *_, **__):
            if cuda:
                torch.cuda.synchronize()
            step_times.append(time.perf_counter() - self.start)
            step_ends.append(time.perf_counter())
            gen_per_step.append(sum(gen_times[self.gen_before:]))
            step_tokens.append(gen_tokens[self.tokens_before:])
            log({"event": "trl_step", "step": len(step_times), "warmup": len(step_times) <= warmup,
                 "step_s": round(step_times[-1], 4), "gen_s": round(gen_per_step[-1], 4)})

    trainer.add_callback(Timer())
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    measured_steps = step_times[warmup:] or step_times
    measured_gen = gen_per_step[warmup:] or gen_per_step
    step = statistics.median(measured_steps)
    # between step ends (what a user waits per step: the trainer's own work between callbacks included); the
    # first measured step's wall needs the end of the step before it
    walls = [b - a for a, b in itertools.pairwise(step_ends)][max(warmup - 1, 0):]
    step_wall = statistics.median(walls) if walls else None
    gen = statistics.median(measured_gen) if any(measured_gen) else None
    # real tokens per measured step (prompt + completions up to their end token), as the engine counts them
    measured_tokens = step_tokens[warmup:] or step_tokens
    prompt_tok = statistics.mean(sum(p for p, _ in calls) for calls in measured_tokens)
    lengths = [n for calls in measured_tokens for _, ls in calls for n in ls]
    resp_tok = sum(lengths) / max(len(measured_tokens), 1)
    result = {"step_s": step, "step_wall_s": step_wall, "gen_s": gen, "runs": [round(v, 4) for v in measured_steps],
              "tokens_per_s_step": (prompt_tok + resp_tok) / step,
              "gen_tokens_per_s": resp_tok / gen if gen else None, "response_lengths": lengths,
              "gradient_checkpointing": bool(args.gradient_checkpointing)}
    if cuda:
        result["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
    del trainer
    if cuda:
        torch.cuda.empty_cache()
    return result
