"""`python -m engine.bench --workload w1|w2 --plain-vllm`: plain vLLM (`LLM.generate`) on the workload's prompts,
the bar for the rollout's speed.

The same model directory, the same step-0 prompts as token ids (each repeated n times, as the rollout gets them),
the same sampling (temperature 1, no top-k/top-p) and the same answer lengths: W1's answers are exactly
`response_len` tokens (min_tokens = max_tokens), W2's end at the model's end token (its eos channel) or the cap.
vLLM's own defaults otherwise (prefix caching, CUDA graphs, its attention backend, gpu_memory_utilization 0.9
unless `--vllm-gpu-memory` says otherwise). Two variants in one engine: `plain` (no log-probs, what a user of vLLM
runs) and `plain+logprobs` (the sampled tokens' log-probs too, which the rollout needs for the mismatch metric).
Per variant: median time of `steps` calls after `warmup`, real answer tokens/s, and W2's length histogram."""
from __future__ import annotations

import os
import statistics
import time
from types import SimpleNamespace

from engine.bench.workloads import Workload, length_histogram, model_dir


def run_plain_vllm(w: Workload, device: str, emit, warmup: int = 1, steps: int = 3,
                   gpu_memory_utilization: float = 0.9) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # as the rollout runs it: the engine in-process
    from transformers import AutoTokenizer, GenerationConfig
    from vllm import LLM, SamplingParams

    from engine.bench.decode_variants import workload_prompts
    from engine.rollout.hf_rollout import eos_ids

    path = model_dir(w)
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids, am, _ = workload_prompts(w, tokenizer, "cpu")
    rows = [{"prompt_token_ids": i[m.bool()].tolist()} for i, m in zip(ids, am)]
    t0 = time.perf_counter()
    kwargs = {"gpu_memory_utilization": gpu_memory_utilization} if device == "cuda" else {}
    llm = LLM(model=path, skip_tokenizer_init=True, dtype="bfloat16" if device == "cuda" else "float32", seed=0,
              max_model_len=w.prompt_len + w.response_len, **kwargs)
    emit({"phase": "vllm_start", "timing_s": round(time.perf_counter() - t0, 2)})
    min_tokens = 0 if w.eos_rate > 0 else w.response_len
    # without its tokenizer vLLM knows no end token: name the model's, as the rollout does (same rule)
    try:
        generation_config = GenerationConfig.from_pretrained(path)
    except OSError:  # no generation_config.json: the tokenizer's end token
        generation_config = SimpleNamespace(eos_token_id=None)
    eos = eos_ids(SimpleNamespace(generation_config=generation_config), tokenizer)
    for name, logprobs in (("plain", None), ("plain+logprobs", 0)):
        params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_tokens=w.response_len,
                                min_tokens=min_tokens, detokenize=False, logprobs=logprobs, stop_token_ids=eos)
        times, tokens, lengths = [], [], []
        for i in range(warmup + steps):
            t = time.perf_counter()
            outs = llm.generate(rows, params, use_tqdm=False)
            t = time.perf_counter() - t
            if i >= warmup:
                lens = [len(o.outputs[0].token_ids) for o in outs]
                times.append(t)
                tokens.append(sum(lens))
                lengths = lens
        t = statistics.median(times)
        emit({"phase": "gen", "variant": name, "timing_s": round(t, 4),
              "tokens_per_s": round(statistics.median(tokens) / t, 1), "runs": [round(x, 4) for x in times],
              "sequences": len(rows)})
        if w.eos_rate > 0:
            emit({"phase": "response_lengths", "variant": name, **length_histogram(lengths, w.response_len)})
