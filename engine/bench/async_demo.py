"""The demo presets in sync and in verl's async modes, side by side: does the async run learn as much, and how long
does it take (issue 29, "Shown: Learning").

    python -m engine.bench.async_demo [--algos grpo,ppo] [--modes sync,colocate_async,separate_async]
        [--steps N] [--test-freq 25] [--gain 0.20] [--threshold 2] [--out FILE] [key=value ...]

Each run is `python -m engine.main_ppo --config-name PRESET` as a user runs it (GRPO: `demo`, PPO: `demo_ppo`; one
in-process worker), validating every --test-freq steps on the 1,000 held-out questions (greedy). A run stops as
soon as the learning tests' target holds (two consecutive validations averaging --gain above step 0's), else at
the preset's last step (or --steps N: the short mode, which runs N steps and validates at 0 and N). The async modes
run one batch ahead: max_off_policy_threshold 2 and num_warmup_batches 1; separate_async with one worker is the
same driver with verl's parameter_sync_step = train_batch_size / ppo_mini_batch_size (one weight sync a step).
The sync run is the preset unchanged (on CPU: transformers' generate, no rollout correction); the async modes add
what they need (the static decoder's behaviour log-probs and token TIS).

stdout: one JSON line per run (wall time, steps, every validation, the step and seconds at which the target held,
mean staleness, median step time), then a table. Progress goes to stderr. `key=value` arguments are engine
overrides for every run (after the mode's).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

from engine.loggers.file import read_written

PRESETS = {"grpo": "demo", "ppo": "demo_ppo"}
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
MODES = ("sync", "colocate_async", "separate_async")
VAL_KEY = "val-core/arith/reward/mean@1"
STALENESS_KEY = "training/off_policy/trajectory_staleness/mean"


def sync_step(algo: str, overrides: list[str]) -> int:
    """verl's parameter_sync_step for one weight sync a step: train_batch_size / ppo_mini_batch_size, read from the
    preset and the run's overrides."""
    import yaml

    preset = yaml.safe_load((CONFIGS / f"{PRESETS[algo]}.yaml").read_text())
    given = dict(o.split("=", 1) for o in overrides if "=" in o)
    bsz = int(given.get("data.train_batch_size", preset["data"]["train_batch_size"]))
    mini = int(given.get("actor_rollout_ref.actor.ppo_mini_batch_size",
                         preset["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"]))
    return max(1, bsz // mini)  # a remainder is refused by the engine, naming the key


def mode_overrides(algo: str, mode: str, threshold: int, overrides: list[str]) -> list[str]:
    if mode == "sync":
        return []
    args = ["trainer.use_v1=True", f"trainer.v1.trainer_mode={mode}",
            f"trainer.v1.sampler.max_off_policy_threshold={threshold}", f"trainer.v1.{mode}.num_warmup_batches=1"]
    if mode == "separate_async":
        args.append(f"trainer.v1.separate_async.parameter_sync_step={sync_step(algo, overrides)}")
    return args


def target_step(val: list[tuple[int, float]], gain: float) -> int | None:
    """The first step at which two consecutive validations after step 0 average `gain` above step 0's (the
    learning tests' rule, tests/integration/helpers.py)."""
    if not val or val[0][0] != 0:
        return None
    for (_, a), (step, b) in pairwise(val[1:]):
        if (a + b) / 2 - val[0][1] >= gain:
            return step
    return None


def engine_env() -> dict:
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("RAY_ADDRESS", None)  # one in-process worker, no cluster
    return env


def stop_session(proc: subprocess.Popen) -> None:
    """Stops a run started in its own session (start_new_session=True): the run and anything it started."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def one_run(algo: str, mode: str, args, workdir: Path) -> dict:
    out = workdir / f"{algo}-{mode}"
    overrides = [f"trainer.default_local_dir={out}", "trainer.logger=[console,file]", "trainer.save_freq=-1",
                 f"trainer.test_freq={args.steps or args.test_freq}", "trainer.val_before_train=True",
                 *mode_overrides(algo, mode, args.threshold, args.overrides)]
    if args.steps:
        overrides.append(f"trainer.total_training_steps={args.steps}")
    cmd = [sys.executable, "-m", "engine.main_ppo", "--config-name", PRESETS[algo], *overrides, *args.overrides]
    console = (workdir / f"{algo}-{mode}.log").open("w+")
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=engine_env(), stdout=console, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    seen: dict[int, float] = {}  # step -> seconds after launch when its metrics line was read
    hit, records = None, []
    try:
        while True:
            done = proc.poll() is not None
            records = read_written(out / "metrics.jsonl")
            now = time.monotonic() - start
            for r in records:
                seen.setdefault(r["step"], now)
            val = sorted((r["step"], r["data"][VAL_KEY]) for r in records if VAL_KEY in r["data"])
            hit = target_step(val, args.gain)
            if done or (hit is not None and not args.no_stop):
                break
            time.sleep(0.5)
    finally:
        stop_session(proc)
    wall = time.monotonic() - start
    console.seek(0)
    tail = console.read()[-4000:]
    console.close()
    if hit is None and proc.returncode != 0:
        raise SystemExit(f"{algo} {mode} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return summarise(algo, mode, records, seen, hit, wall, args)


def summarise(algo, mode, records, seen, hit, wall, args) -> dict:
    steps = {r["step"]: r["data"] for r in records}
    trained = sorted(s for s, d in steps.items() if "timing_s/step" in d)
    val = sorted((s, d[VAL_KEY]) for s, d in steps.items() if VAL_KEY in d)
    staleness = [steps[s][STALENESS_KEY] for s in trained if STALENESS_KEY in steps[s]]
    step_s = [steps[s]["timing_s/step"] for s in trained]
    gen_s = [steps[s]["timing_s/gen"] for s in trained if "timing_s/gen" in steps[s]]
    return {
        "algo": algo, "preset": PRESETS[algo], "mode": mode,
        "threshold": 1 if mode == "sync" else args.threshold,
        "wall_s": round(wall, 1),
        "startup_s": round(min(seen.values()), 1) if seen else None,  # launch to the first metrics line (step 0)
        "steps": trained[-1] if trained else 0,
        "validations": [[s, round(v, 4)] for s, v in val],
        "start_acc": round(val[0][1], 4) if val else None,
        "best_gain": round(max(v for _, v in val[1:]) - val[0][1], 4) if len(val) > 1 else None,
        "target_gain": args.gain, "target_step": hit,
        "time_to_target_s": round(seen[hit], 1) if hit is not None else None,  # from launch, start-up included
        "train_s_to_target": round(sum(steps[s]["timing_s/step"] for s in trained if s <= hit), 1)
        if hit is not None else None,  # the steps alone (no start-up, no validation)
        "staleness_mean": round(statistics.mean(staleness), 3) if staleness else None,
        "staleness_max": max(steps[s]["training/off_policy/trajectory_staleness/max"] for s in trained
                             if "training/off_policy/trajectory_staleness/max" in steps[s]) if staleness else None,
        "step_s_median": round(statistics.median(step_s), 3) if step_s else None,
        "gen_s_median": round(statistics.median(gen_s), 3) if gen_s else None,  # async: the wait for the batch
    }


def table(rows: list[dict]) -> str:
    head = ("algo", "mode", "steps", "wall s", "start", "best", "+target at", "s to target", "train s", "stale",
            "step s", "gen s")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        def pct(v):
            return "-" if v is None else f"{100 * v:.1f}"
        lines.append(" | ".join(str(x) for x in (
            r["algo"], r["mode"], r["steps"], r["wall_s"], pct(r["start_acc"]),
            "-" if r["best_gain"] is None else f"+{100 * r['best_gain']:.1f}",
            r["target_step"] if r["target_step"] is not None else "not reached",
            "-" if r["time_to_target_s"] is None else r["time_to_target_s"],
            "-" if r["train_s_to_target"] is None else r["train_s_to_target"],
            "-" if r["staleness_mean"] is None else r["staleness_mean"], r["step_s_median"], r["gen_s_median"])))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.async_demo", description=__doc__.split("\n")[0])
    p.add_argument("--algos", default="grpo,ppo", help="comma-separated: grpo (preset demo), ppo (demo_ppo)")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    p.add_argument("--steps", type=int, default=0, help="short mode: N steps, validation at 0 and N (default: the "
                                                       "preset's steps, validating every --test-freq)")
    p.add_argument("--test-freq", type=int, default=25, help="validate every N steps (default 25)")
    p.add_argument("--gain", type=float, default=0.20, help="the held-out target over step 0 (default 0.20)")
    p.add_argument("--threshold", type=int, default=2, help="async modes' max_off_policy_threshold (default 2: one "
                                                            "batch ahead)")
    p.add_argument("--no-stop", action="store_true", help="run every step even after the target holds")
    p.add_argument("--workdir", default=None, help="where the runs write (default: a new temporary directory)")
    p.add_argument("--out", default=None, help="also append the JSON lines to this file")
    p.add_argument("overrides", nargs="*", help="engine overrides key=value, for every run")
    args = p.parse_args(argv)
    algos, modes = args.algos.split(","), args.modes.split(",")
    for name, given, allowed in (("--algos", algos, PRESETS), ("--modes", modes, MODES)):
        bad = [x for x in given if x not in allowed]
        if bad:
            p.error(f"{name}: unknown {bad}; choose from {', '.join(allowed)}")
    if args.steps < 0 or args.test_freq < 1 or args.threshold < 1:
        p.error("--steps must be >= 0, --test-freq and --threshold >= 1")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rlstudio-async-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for algo in algos:
        for mode in modes:
            print(f"[async_demo] {algo} {mode} ... (console: {workdir}/{algo}-{mode}.log)", file=sys.stderr, flush=True)
            row = one_run(algo, mode, args, workdir)
            rows.append(row)
            line = json.dumps(row)
            print(line, flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
    print(table(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
