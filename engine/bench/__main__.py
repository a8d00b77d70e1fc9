"""python -m engine.bench --workload w1|w2 [--algo grpo|ppo] [--vs-trl] [--anchors] [--update-variants]
[--decode-variants [--profile]] [--plain-vllm] [--steps 3] [key=value ...]

Runs the workload's train step through the real engine (the config, worker group, TrainWorker and
PPOTrainer.train_step of a training run; `key=value` arguments are ordinary engine overrides on top of the
workload's), then optionally TRL's GRPOTrainer and the plain-transformers anchors on the identical workload
in the same invocation. stdout gets one JSON line per result (per engine phase, memory, TRL, ratio);
progress goes to stderr. `--out FILE` also appends the result lines to FILE. W2 (answers that end at the end
token) also prints each implementation's response-length histogram; its prompts are GSM8K's (`--gsm8k DIR`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    from engine.bench.workloads import WORKLOADS, length_histogram

    p = argparse.ArgumentParser(prog="python -m engine.bench", description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="w1", choices=sorted(WORKLOADS))
    p.add_argument("--tiny", action="store_true", help="shorthand for --workload tiny (CPU tests)")
    p.add_argument("--algo", default="grpo", choices=["grpo", "ppo"], help="ppo: GAE with a critic")
    p.add_argument("--vs-trl", action="store_true", help="also run TRL's GRPOTrainer and print the ratio")
    p.add_argument("--trl-only", action="store_true", help="run TRL alone (no engine run)")
    p.add_argument("--no-engine", action="store_true", help="skip the engine run (e.g. anchors alone)")
    p.add_argument("--anchors", action="store_true", help="also time plain generate and plain fwd+bwd")
    p.add_argument("--update-variants", action="store_true",
                   help="only the actor update, in-process, per one-worker FSDP layout and accumulation mode")
    p.add_argument("--decode-variants", action="store_true",
                   help="only the rollout, in-process, per static-decoder option not yet on by default")
    p.add_argument("--plain-vllm", action="store_true",
                   help="only plain vLLM's LLM.generate on the workload's prompts (the bar for the rollout's speed)")
    p.add_argument("--vllm-gpu-memory", type=float, default=0.9, help="with --plain-vllm: gpu_memory_utilization")
    p.add_argument("--variants", default=None, help="with --decode-variants: comma-separated names (default all)")
    p.add_argument("--profile", action="store_true", help="with --decode-variants: GPU kernels by time per variant")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")
    p.add_argument("--trl-warmup", type=int, default=None, help="TRL's untimed steps (default: --warmup)")
    p.add_argument("--steps", type=int, default=3, help="timed steps; figures are medians (default 3)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--label", default="", help="a name for this configuration in the output lines")
    p.add_argument("--out", default=None, help="also append the JSON result lines to this file")
    p.add_argument("--gsm8k", default=None, help="directory with GSM8K's train.jsonl for W2's prompts (default: "
                                                 "$RLSTUDIO_GSM8K, else shared/data/gsm8k beside the checkout; "
                                                 "synthetic lengths if absent)")
    p.add_argument("overrides", nargs="*", help="engine overrides key=value (as for engine.main_ppo)")
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.gsm8k:
        os.environ["RLSTUDIO_GSM8K"] = args.gsm8k

    import torch

    w = WORKLOADS["tiny" if args.tiny else args.workload]
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    base = {"workload": w.name, "algo": args.algo, "device": device}
    if args.label:
        base["label"] = args.label

    def emit(record: dict) -> None:
        line = json.dumps({**base, **record})
        print(line, flush=True)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    def log(record: dict) -> None:
        print(json.dumps({"t": round(time.time(), 1), **record}, default=str), file=sys.stderr, flush=True)

    if args.update_variants:
        from engine.bench.update_variants import run_update_variants

        run_update_variants(w, device, args.overrides, lambda r: emit({"impl": "rlstudio", **r}), args.warmup,
                            args.steps)
        return 0

    if args.decode_variants:
        from engine.bench.decode_variants import run_decode_variants

        run_decode_variants(w, device, args.overrides, lambda r: emit({"impl": "rlstudio", **r}), args.warmup,
                            args.steps, args.profile, args.variants.split(",") if args.variants else None)
        return 0

    if args.plain_vllm:
        from engine.bench.vllm_plain import run_plain_vllm

        run_plain_vllm(w, device, lambda r: emit({"impl": "vllm", **r}), args.warmup, args.steps,
                       args.vllm_gpu_memory)
        return 0

    engine_step = engine_wall = None
    if not (args.trl_only or args.no_engine):
        from engine.bench.engine_run import run_engine

        res = run_engine(w, args.algo, args.warmup, args.steps, device, args.overrides, log)
        phases = res["phases"]
        if "old_log_prob" not in phases:
            exact = "actor_rollout_ref.rollout.exact=True" in args.overrides
            emit({"impl": "rlstudio", "phase": "old_log_prob", "timing_s": 0.0, "tokens_per_s": None,
                  "note": "skipped: exact mode, the rollout's log-probs are the old ones (docs/exact-mode.md)" if exact
                  else "skipped: one epoch over one mini-batch is on-policy; the actor update computes "
                       "the old log-probs in its own forward"})
        for phase in phases.values():
            emit({"impl": "rlstudio", **phase})
        mem = res["memory"]
        emit({"impl": "rlstudio", "phase": "memory",
              "peak_allocated_gb": round(mem.get("perf/max_memory_allocated_gb", 0.0), 2) or None,
              "peak_reserved_gb": round(mem.get("perf/max_memory_reserved_gb", 0.0), 2) or None,
              "cpu_max_rss_gb": round(mem["perf/cpu_max_rss_gb"], 2) if "perf/cpu_max_rss_gb" in mem else None,
              **{k.removeprefix("perf/"): round(v, 4) for k, v in mem.items()
                 if k.endswith(("optimizer_state_gb", "trained_param_gb"))}})
        emit({"impl": "rlstudio", "phase": "check", "n_params": res["n_params"],
              "n_trainable_params": res.get("n_trainable_params"), "device_name": res["device"],
              "rollout_log_probs_absdiff": res["rollout_log_probs_absdiff_mean"],
              "rollout_probs_diff_mean": res["rollout_probs_diff_mean"],
              "response_length_mean": res["response_length_mean"], "actor_kl_loss": res["actor_kl_loss"],
              "staleness_mean": res["staleness_mean"], "overrides": args.overrides})
        if w.eos_rate > 0:
            emit({"impl": "rlstudio", "phase": "response_lengths",
                  **length_histogram(res["response_lengths"], w.response_len)})
        engine_step = phases["step"]["timing_s"]
        engine_wall = phases["step_wall"]["timing_s"] if "step_wall" in phases else None

    if args.vs_trl or args.trl_only:
        if args.algo != "grpo":
            print("--vs-trl compares GRPO only", file=sys.stderr)
            return 2
        from engine.bench.trl_run import run_trl

        trl = run_trl(w, args.warmup if args.trl_warmup is None else args.trl_warmup, args.steps, device, log)
        emit({"impl": "trl", "phase": "step", "timing_s": round(trl["step_s"], 4),
              "step_wall_s": round(trl["step_wall_s"], 4) if trl.get("step_wall_s") else None,
              "tokens_per_s": round(trl["tokens_per_s_step"], 1), "runs": trl["runs"],
              "gradient_checkpointing": trl["gradient_checkpointing"],
              "peak_allocated_gb": round(trl["peak_memory_gb"], 2) if "peak_memory_gb" in trl else None})
        emit({"impl": "trl", "phase": "gen", "timing_s": round(trl["gen_s"], 4) if trl["gen_s"] else None,
              "tokens_per_s": round(trl["gen_tokens_per_s"], 1) if trl["gen_tokens_per_s"] else None})
        if w.eos_rate > 0:
            emit({"impl": "trl", "phase": "response_lengths",
                  **length_histogram(trl["response_lengths"], w.response_len)})
        if engine_step:
            from engine.bench.ratios import vs_trl

            # wall time against wall time (ratios.py says why): no ratio where a side has no time between step ends
            emit(vs_trl(engine_wall, trl.get("step_wall_s"), engine_step, trl["step_s"]))

    if args.anchors:
        from engine.bench.anchors import run_anchors

        a = run_anchors(w, device, log)
        emit({"impl": "plain", "phase": "gen", "timing_s": round(a["generate_s"], 4),
              "tokens_per_s": round(a["generate_tokens_per_s"], 1)})
        emit({"impl": "plain", "phase": "train", "timing_s": round(a["train_s"], 4),
              "tokens_per_s": round(a["train_tokens_per_s"], 1), "mfu": round(a.get("train_mfu", 0), 4) or None})
    return 0


if __name__ == "__main__":
    sys.exit(main())
