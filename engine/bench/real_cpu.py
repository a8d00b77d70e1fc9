"""The real model learning on CPU (issue 37, section 2): the `real_next_number` preset (SmolLM2-135M-Instruct, GRPO
with a LoRA adapter, "What number comes after 674?") over several seeds, each for at most --minutes of wall time,
printing the held-out curve as it comes.

    python -m engine.bench.real_cpu [--seeds 1,2,3] [--minutes 20] [--gain 0.15] [--stop-at-goal] [--workdir DIR]
                                    [key=value ...]

Each run is `python -m engine.main_ppo --config-name real_next_number data.seed=S trainer.seed=S` as a user runs it
(one in-process worker; set OMP_NUM_THREADS / taskset to fix the cores). Held-out accuracy is greedy exact match on
the 99 held-out numbers (val-core/next_number/reward/mean@1), at step 0 and every trainer.test_freq steps. A run ends
at --minutes (counted from launch, start-up included) or at the preset's last step. The goal: --gain (absolute) over
step 0 within the time, by the learning tests' rule (two consecutive validations averaging the gain).
With --stop-at-goal a seed is stopped as soon as it has reached the goal (to spare a shared machine): its line
then gives the time to the goal and the curve so far, not what the remaining minutes would have added.

stdout: per validation a line `seed S  step N  t=SECONDS  held-out X%`, one JSON line per seed as it ends, then a summary.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine.bench.async_demo import engine_env, stop_session, target_step
from engine.loggers.file import read_written

PRESET = "real_next_number"
VAL_KEY = "val-core/next_number/reward/mean@1"


def one_seed(seed: int, args, workdir: Path) -> dict:
    out = workdir / f"seed{seed}"
    cmd = [sys.executable, "-m", "engine.main_ppo", "--config-name", PRESET, f"data.seed={seed}", f"trainer.seed={seed}",
           f"trainer.default_local_dir={out}", "trainer.logger=[console,file]", *args.overrides]
    console = (workdir / f"seed{seed}.log").open("w+")
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=engine_env(), stdout=console, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    printed: set[int] = set()
    seen: dict[int, float] = {}
    val: list[tuple[int, float]] = []
    try:
        while proc.poll() is None and time.monotonic() - start < args.minutes * 60:
            now = time.monotonic() - start
            for r in read_written(out / "metrics.jsonl"):
                seen.setdefault(r["step"], now)
                if VAL_KEY in r["data"] and r["step"] not in printed:
                    printed.add(r["step"])
                    val.append((r["step"], r["data"][VAL_KEY]))
                    print(f"seed {seed}  step {r['step']:3d}  t={now:6.0f}s  held-out {100 * r['data'][VAL_KEY]:.1f}%"
                          f"  (load average {os.getloadavg()[0]:.1f})", flush=True)
            if args.stop_at_goal and target_step(sorted(val), args.gain) is not None:
                print(f"seed {seed}  goal reached at t={time.monotonic() - start:.0f}s: stopped (--stop-at-goal)",
                      flush=True)
                break
            time.sleep(1.0)
    finally:
        stop_session(proc)
    console.seek(0)
    tail = console.read()[-3000:]
    console.close()
    if not val:
        raise SystemExit(f"seed {seed}: no validation within {args.minutes} min (exit {proc.returncode}):\n{tail}")
    val.sort()
    hit = target_step(val, args.gain)
    steps = [r["step"] for r in read_written(out / "metrics.jsonl") if "timing_s/step" in r["data"]]
    return {"seed": seed, "wall_s": round(time.monotonic() - start, 1), "steps": max(steps, default=0),
            "validations": [[s, round(v, 4)] for s, v in val], "start": round(val[0][1], 4),
            "best_gain": round(max((v for _, v in val[1:]), default=val[0][1]) - val[0][1], 4),
            "target_gain": args.gain, "target_step": hit, "stopped_at_goal": bool(args.stop_at_goal and hit is not None),
            "time_to_target_s": round(seen[hit], 1) if hit is not None else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.real_cpu", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--minutes", type=float, default=20.0, help="wall-time budget per seed, start-up included")
    p.add_argument("--gain", type=float, default=0.15, help="held-out target over step 0, absolute (default 0.15)")
    p.add_argument("--stop-at-goal", action="store_true",
                   help="stop a seed once it has reached the goal (spares a shared machine)")
    p.add_argument("--workdir", default=None)
    p.add_argument("overrides", nargs="*", help="engine overrides key=value, for every seed")
    args = p.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        p.error(f"--seeds: comma-separated integers, got {args.seeds!r}")
    if args.minutes <= 0:
        p.error("--minutes must be > 0")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rlstudio-real-cpu-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"[real_cpu] preset {PRESET}, {len(seeds)} seeds, {args.minutes} min each, cores: {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f} (the cores may be shared with other work: see each validation's "
          f"load average); consoles in {workdir}", flush=True)
    rows = []
    for seed in seeds:  # each seed's line as soon as it ends: a benchmark cut short keeps the seeds it finished
        rows.append(one_seed(seed, args, workdir))
        print(json.dumps(rows[-1]), flush=True)
    reached = sum(r["target_step"] is not None for r in rows)
    gains = ", ".join(f"+{100 * r['best_gain']:.1f}" for r in rows)
    print(f"target +{100 * args.gain:.0f} points within {args.minutes} min: {reached} of {len(rows)} seeds; "
          f"best gains {gains}")
    return 0 if reached == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
