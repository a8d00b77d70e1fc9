"""Exact mode's cost (docs/exact-mode.md): a workload's train step, default vs exact, in one invocation.

    python -m engine.bench.exact_compare --workload tiny [--steps 2] [--out FILE] [key=value ...]
    python -m engine.bench.exact_compare --workload w1 --out $OUT/exact-w1.jsonl     (GPU)

Runs `python -m engine.bench` (the real engine's train step, timed per phase by the trainer) for four
configurations: the default static decoder and exact mode, each with the workload's one mini-batch per step (the
default already skips the old-log-prob pass there: the update is on-policy) and with 4 mini-batches per step (the
default then runs the old-log-prob pass, which exact mode skips). Prints one line per configuration and phase
(seconds, median of --steps) and the mismatch each reported; --out keeps the raw JSON lines.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

CONFIGS = {  # label -> engine overrides
    "default": ["+actor_rollout_ref.rollout.engine_kwargs.hf.decode=static"],
    "exact": ["actor_rollout_ref.rollout.exact=True"],
}
PHASES = ("gen", "old_log_prob", "ref", "update_actor", "step", "step_wall")  # step_wall: between step ends


def mini_batch_overrides(workload: str, minis: int) -> list[str]:
    from engine.bench.workloads import WORKLOADS

    prompts = WORKLOADS[workload].prompts
    return [] if minis == 1 else [f"actor_rollout_ref.actor.ppo_mini_batch_size={max(1, prompts // minis)}"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.exact_compare", description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="tiny")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--minis", default="1,4", help="mini-batches per step to compare (default 1,4)")
    p.add_argument("--out", default=None, help="append the raw JSON result lines here")
    p.add_argument("overrides", nargs="*", help="engine overrides for every configuration")
    args = p.parse_args(argv)
    rows = []
    for minis in (int(m) for m in args.minis.split(",")):
        for label, overrides in CONFIGS.items():
            name = f"{label}/{minis}mb"
            cmd = [sys.executable, "-m", "engine.bench", "--workload", args.workload, "--steps", str(args.steps),
                   "--warmup", str(args.warmup), "--label", name, *(["--out", args.out] if args.out else []),
                   *overrides, *mini_batch_overrides(args.workload, minis), *args.overrides]
            print(f"[exact_compare] {name}: {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                print(f"[exact_compare] {name} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
                return done.returncode
            lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
            phases = {x["phase"]: x for x in lines if "phase" in x}
            check = phases.get("check", {})
            rows.append((name, {k: phases[k].get("timing_s") for k in PHASES if k in phases},
                         check.get("rollout_probs_diff_mean"), check.get("rollout_log_probs_absdiff")))
    print(f"{'config':<16}" + "".join(f"{k:>14}" for k in PHASES) + f"{'|dp| mean':>12}{'|dlogp| mean':>14}")
    for name, t, dp, dlp in rows:
        cells = "".join(f"{t[k]:>14.3f}" if t.get(k) is not None else f"{'-':>14}" for k in PHASES)
        fig = (lambda v, w: f"{v:>{w}.3g}" if v is not None else f"{'-':>{w}}")
        print(f"{name:<16}{cells}{fig(dp, 12)}{fig(dlp, 14)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
