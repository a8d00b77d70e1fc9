"""`python -m engine.bench --update-variants`: the actor update of a workload, in-process (one TrainWorker, no
Ray), under each one-worker FSDP layout and gradient-accumulation mode (engine/distributed/fsdp.py), plus the
log-prob kernels with and without chunking. The figures that chose the defaults."""
from __future__ import annotations

import gc
import statistics
import time

import torch

from engine.bench.workloads import Workload, model_dir, sync

UNITS = ("root", "layers")
MODES = ("nosync", "gathered", "off")



def logprob_kernels(vocab: int, rows: int, device: str, emit) -> None:
    """Forward + backward of the fused log-prob/entropy over [rows, vocab] bf16 logits: 512-row chunks vs one."""
    from engine.algos.logprob import logprobs_and_entropy

    logits = torch.randn(rows, vocab, device=device, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (rows,), device=device)
    for chunk in (512, None):
        fwd, bwd = [], []
        for _ in range(4):  # the first call compiles
            sync(device)
            t0 = time.perf_counter()
            lp, _ = logprobs_and_entropy(logits, labels, 1.0, True, chunk_size=chunk)
            sync(device)
            t1 = time.perf_counter()
            lp.sum().backward()
            sync(device)
            fwd.append(t1 - t0)
            bwd.append(time.perf_counter() - t1)
            logits.grad = None
        emit({"phase": "logprob_kernels", "rows": rows, "chunk_rows": chunk or "one pass",
              "fwd_ms": round(statistics.median(fwd[1:]) * 1e3, 3), "bwd_ms": round(statistics.median(bwd[1:]) * 1e3, 3)})


def synthetic_update_batch(w: Workload):
    """An on-policy GRPO update batch of the workload's shape (advantages and reference log-probs random)."""
    from engine.protocol import Batch

    g = torch.Generator().manual_seed(0)
    seq, resp = w.prompt_len + w.response_len, w.response_len
    ids = torch.randint(0, 94, (w.sequences, seq), generator=g)
    return Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                  "position_ids": torch.arange(seq).expand(w.sequences, seq).clone(),
                  "responses": ids[:, -resp:].clone(), "response_mask": torch.ones(w.sequences, resp, dtype=torch.long),
                  "advantages": torch.randn(w.sequences, resp, generator=g),
                  "ref_log_prob": -torch.rand(w.sequences, resp, generator=g) * 12})


def run_update_variants(w: Workload, device: str, extra: list[str], emit, warmup: int = 1, repeats: int = 3) -> None:
    """Per variant: `warmup` untimed updates, then `repeats` timed ones (the bench's --warmup and --steps)."""
    from engine.bench.engine_run import engine_overrides
    from engine.config import build_config
    from engine.distributed import fsdp
    from engine.trainer.metrics import mfu
    from engine.workers.worker import TrainWorker, free_port

    cfg = build_config(engine_overrides(w, model_dir(w), "grpo", 10, device) + list(extra))
    batch = synthetic_update_batch(w)
    tokens = w.sequences * (w.prompt_len + w.response_len)
    defaults = (fsdp.ONE_WORKER_UNITS, fsdp.LOCAL_ACCUMULATION)
    try:
        for units in UNITS:
            fsdp.ONE_WORKER_UNITS = units
            worker = TrainWorker(0, 1, cfg, 10, device)
            info = worker.init("127.0.0.1", free_port(), False)
            if units == UNITS[0]:
                vocab = worker.actor_module.config.vocab_size
                logprob_kernels(vocab, w.micro * w.response_len, device, emit)
            for mode in MODES:
                fsdp.LOCAL_ACCUMULATION = mode
                times = []
                if device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                for step in range(warmup + repeats):  # the first ones warm up (compile)
                    batch.info["global_step"] = step
                    sync(device)
                    t0 = time.perf_counter()
                    worker.actor.update_policy(batch.to(worker.device))
                    sync(device)
                    times.append(time.perf_counter() - t0)
                t = statistics.median(times[warmup:])
                value = mfu(info["n_params"], tokens, t, info["device_name"], 1)
                emit({"phase": "update_variant", "one_worker_units": units, "accumulation": mode,
                      "default": (units, mode) == defaults, "timing_s": round(t, 4),
                      "runs": [round(x, 4) for x in times[warmup:]], "mfu": round(value, 4) if value is not None else None,
                      "peak_allocated_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2)
                      if device == "cuda" else None})
            worker.shutdown()
            del worker
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()
    finally:
        fsdp.ONE_WORKER_UNITS, fsdp.LOCAL_ACCUMULATION = defaults
