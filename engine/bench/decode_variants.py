"""`python -m engine.bench --decode-variants`: the rollout alone, in-process, at the static decoder's defaults for
the device and with each default option off in turn (the Triton decode attention, the fused sampling kernel, the
whole decode step compiled; all three off), on the workload's model, prompts and answer lengths. One model load for all variants, so one device call settles the defaults.

Per variant it prints the median time of `--steps` generate calls after `--warmup`, real answer tokens/s, what
actually ran (a kernel that fails its first-use check falls back and says so), and the check: mean |rollout
log-prob − the same module's teacher-forced log-prob| over the first 64 answers (bf16 ~0.009; fp32 < 1e-4).
`--profile` adds each variant's GPU kernels by time (torch.profiler over one more call): where the step goes."""
from __future__ import annotations

import statistics
import time

import torch

from engine.bench.workloads import Workload, model_dir, sync

OPTIONS = ("triton_attention", "fused_sampling", "compile_step")  # on by default on GPU (engine_kwargs.hf keys)


def variants_for(device: str) -> dict[str, dict]:
    """The StaticDecoder options of each variant: the engine's defaults on this device, each option away from its
    default in turn, all three off (the GPU defaults before 2026-12-06), and the old masked prefill."""
    from types import SimpleNamespace

    from engine.rollout.hf_rollout import hf_options

    defaults = hf_options(SimpleNamespace(engine_kwargs=SimpleNamespace(hf={})), device)
    base = {k: defaults[k] for k in OPTIONS}
    out = {"default": dict(base)}
    for k in OPTIONS:  # each option away from its default: off where it is on (GPU), on where it is off (CPU)
        if base[k]:
            out[f"no_{k}"] = {**base, k: False}
        else:
            out[k] = {**base, k: True}
    out["none"] = {k: False for k in OPTIONS}
    out["masked_prefill"] = {**base, "causal_prefill": False}  # the prefill before 2026-12-05: 4-D mask
    return out


CHECK_ROWS = 64



def workload_prompts(w: Workload, tokenizer, device: str):
    """The workload's step-0 prompts, each repeated n times as the rollout gets them."""
    from engine.bench.engine_run import make_prompts

    batch = make_prompts(w, tokenizer, seed=0)
    return tuple(batch[k].repeat_interleave(w.n, dim=0).to(device)
                 for k in ("input_ids", "attention_mask", "position_ids"))


def kernel_table(prof, device: str, top: int = 12) -> dict:
    """The `top` GPU kernels (CPU: operators) by total self time, with their share of the total."""
    rows = []
    for evt in prof.key_averages():
        if device == "cuda":
            t = getattr(evt, "self_device_time_total", None)
            if t is None:
                t = getattr(evt, "self_cuda_time_total", 0)
            if evt.device_type.name != "CUDA":
                t = 0
        else:
            t = evt.self_cpu_time_total
        if t:
            rows.append((t, evt.count, evt.key))
    total = sum(r[0] for r in rows) or 1
    rows.sort(reverse=True)
    return {"self_ms_total": round(total / 1e3, 2),
            "kernels": [{"name": k[:90], "ms": round(t / 1e3, 2), "share": round(t / total, 4), "calls": c}
                        for t, c, k in rows[:top]]}


def run_decode_variants(w: Workload, device: str, extra: list[str], emit, warmup: int = 1, steps: int = 3,
                        profile: bool = False, variants: list[str] | None = None) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.protocol import Batch
    from engine.rollout.hf_rollout import assemble, eos_ids
    from engine.rollout.static_decoder import StaticDecoder
    from engine.workers.forward import response_log_probs

    if extra:
        raise SystemExit("--decode-variants takes no engine overrides (it runs the decoder alone): "
                         f"got {' '.join(extra)}")
    table = variants_for(device)
    for name in variants or ():
        if name not in table:
            raise SystemExit(f"unknown decode variant {name!r}; known: {', '.join(table)}")
    path = model_dir(w)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa").to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids, am, pos = workload_prompts(w, tokenizer, device)
    eos = eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    # as the workload's engine run: fixed-length answers unless the model ends them (eos_rate)
    min_new = 0 if w.eos_rate > 0 else w.response_len
    for name in variants or list(table):
        dec = StaticDecoder(model, compile_blocks=device == "cuda", **table[name])

        def generate(dec=dec):
            return dec.generate(ids, am, pos, w.response_len, eos=eos, pad_id=pad, min_new_tokens=min_new,
                                do_sample=True, temperature=1.0)

        times, tokens = [], []
        for i in range(warmup + steps):
            torch.manual_seed(i)
            sync(device)
            t0 = time.perf_counter()
            resp, lp = generate()
            sync(device)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
                tokens.append(int((resp != pad).sum()))
        stats = dict(dec.last_stats)
        batch = assemble(Batch({"input_ids": ids[:CHECK_ROWS], "attention_mask": am[:CHECK_ROWS],
                                "position_ids": pos[:CHECK_ROWS]}), resp[:CHECK_ROWS], eos, pad)
        with torch.no_grad():
            actor, _ = response_log_probs(model, batch, 1.0)
        mask = batch["response_mask"].bool()
        absdiff = (actor.float() - lp[:CHECK_ROWS])[mask].abs().mean().item()
        t = statistics.median(times)
        record = {"phase": "decode_variant", "variant": name, "timing_s": round(t, 4),
                  "tokens_per_s": round(statistics.median(tokens) / t, 1), "runs": [round(x, 4) for x in times],
                  "attention": stats.get("attention"), "sampling": stats.get("sampling"),
                  "compiled": stats.get("compiled"),
                  "decode_steps": stats.get("steps"), "compactions": stats.get("compactions"),
                  "rollout_log_probs_absdiff": float(f"{absdiff:.3g}")}
        if device == "cuda":
            record["peak_allocated_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        emit(record)
        if profile:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if device == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            sync(device)
            t0 = time.perf_counter()
            with torch.profiler.profile(activities=activities) as prof:
                generate()
                sync(device)
            emit({"phase": "decode_profile", "variant": name, "wall_s": round(time.perf_counter() - t0, 3),
                  **kernel_table(prof, device)})
        del dec
