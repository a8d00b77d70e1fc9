"""How long a one-worker run takes to start in this process vs through a local Ray (what `ray_init.mode=auto`
chose from). Runs the demo config for one step per mode, alternating, and prints one JSON line per run and a
summary: seconds from launch to the first step starting (`[rlstudio] running`) and to the process's exit.

    python -m engine.bench.startup [--repeats 3] [key=value ...]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def one_run(mode: str, extra: list[str]) -> dict:
    out = tempfile.mkdtemp(prefix="rlstudio-startup-")
    args = [sys.executable, "-m", "engine.main_ppo", "--config-name", "demo", f"ray_init.mode={mode}",
            "trainer.total_training_steps=1", "trainer.val_before_train=False", "trainer.test_freq=-1",
            "trainer.logger=[console]", f"trainer.default_local_dir={out}", *extra]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    start = time.perf_counter()
    ready = None
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    tail = []
    for line in proc.stdout:
        tail = (tail + [line])[-20:]
        if ready is None and line.startswith("[rlstudio] running"):
            ready = time.perf_counter() - start
    code = proc.wait()
    if code != 0:
        raise SystemExit(f"{mode} run failed ({code}):\n{''.join(tail)}")
    return {"mode": mode, "to_first_step_s": round(ready or float("nan"), 2),
            "total_s": round(time.perf_counter() - start, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.startup", description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    runs = {"in_process": [], "ray": []}
    for _ in range(args.repeats):
        for mode in runs:
            record = one_run(mode, args.overrides)
            runs[mode].append(record)
            print(json.dumps(record), flush=True)
    print(json.dumps({mode: {"median_to_first_step_s": statistics.median(r["to_first_step_s"] for r in rs),
                             "median_total_s": statistics.median(r["total_s"] for r in rs)}
                      for mode, rs in runs.items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
