"""Start-up and step wall times of one run, read off its console log stamped with seconds since launch (each line
prefixed by device_seed.sh / device_verl.sh's `stamp`), plus the first and later validation and checkpoint timers
from its file-logger JSONL. One clock for rlstudio (`Epoch 1 | Step N | ...`) and verl (`step:N - ...`), so the
same figures of both systems measure the same thing (ratios.vs_verl).

    python3 engine/bench/step_clock.py RUN.log [--metrics RUN.jsonl] [--warm-from 3]

Prints one JSON object: launch → workers up (rlstudio's `[rlstudio] started` line) and → the first step's line
(`first_step_s`: the cold-start figure), the wall time between step ends per step and its median from
`--warm-from` on, and with --metrics each validation's and each checkpoint save's blocking seconds by step.
"""
from __future__ import annotations

import json
import re
import statistics
import sys

STAMP = re.compile(r"^\s*(\d+(?:\.\d+)?) (.*)$")
STEP = re.compile(r"\bStep (\d+) \||\bstep:(\d+) - ")  # rlstudio's console line | verl's
STARTED = "[rlstudio] started"
VALIDATION = ("timing_s/validation", "timing_s/testing")  # rlstudio's | verl's
CHECKPOINT = ("timing_s/save_checkpoint",)


def read_log(lines) -> dict:
    """{"ends": {step: seconds}, "workers_up_s": seconds or None}: each step's first console line (a step's line is
    printed at its end, after its validation and checkpoint); step 0 is validation before training, not a step."""
    ends: dict[int, float] = {}
    up = None
    for line in lines:
        m = STAMP.match(line)
        if not m:
            continue
        t, text = float(m[1]), m[2]
        if up is None and STARTED in text:
            up = t
        s = STEP.search(text)
        if s:
            step = int(s[1] or s[2])
            if step > 0:
                ends.setdefault(step, t)
    return {"ends": ends, "workers_up_s": up}


def summary(path: str, warm_from: int = 3) -> dict:
    # lines end at \n only: a progress bar's \r must not split a stamped line from its step text
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        seen = read_log(f)
    ends = seen["ends"]
    walls = {s: round(ends[s] - ends[s - 1], 2) for s in sorted(ends) if s - 1 in ends}
    warm = [w for s, w in walls.items() if s >= warm_from]
    return {"log": path, "steps": len(ends), "workers_up_s": seen["workers_up_s"],
            "first_step_s": ends.get(min(ends)) if ends else None, "step_wall_s": walls,
            "warm_wall_median_s": round(statistics.median(warm), 3) if warm else None}


def phase_timers(path: str) -> dict:
    """Validation and checkpoint-save seconds by step from a file-logger JSONL ({"step": N, "data": {...}})."""
    out: dict[str, dict[int, float]] = {"validation_s": {}, "save_checkpoint_s": {}}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            data = rec.get("data", {})
            for name, keys in (("validation_s", VALIDATION), ("save_checkpoint_s", CHECKPOINT)):
                for key in keys:
                    if key in data:
                        out[name][int(rec["step"])] = round(float(data[key]), 3)
    return out


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: python3 engine/bench/step_clock.py RUN.log [--metrics RUN.jsonl] [--warm-from 3]", file=sys.stderr)
        return 2
    warm = int(argv[argv.index("--warm-from") + 1]) if "--warm-from" in argv else 3
    try:
        result = summary(argv[0], warm)
    except OSError as e:
        print(f"step_clock: cannot read the log {argv[0]}: {e.strerror}", file=sys.stderr)
        return 2
    if "--metrics" in argv:
        metrics = argv[argv.index("--metrics") + 1]
        try:
            result |= phase_timers(metrics)
        except OSError as e:  # a run that died before its first step wrote none: the log's figures still count
            result["metrics_missing"] = f"{metrics}: {e.strerror}"
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
