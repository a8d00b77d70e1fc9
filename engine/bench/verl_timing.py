"""Per-phase timing of one run from its file-logger JSONL (verl's FileLogger and rlstudio's metrics.jsonl share the
format: one {"step": N, "data": {...}} a line): step 1, the median of the warm steps (3 on), validation and
checkpoint timers where logged, and the peak memory the run logged. Issue 38's side-by-side table reads these.

    python3 engine/bench/verl_timing.py RUN.jsonl [--warm-from 3]
"""
from __future__ import annotations

import json
import statistics
import sys


def summary(path: str, warm_from: int = 3) -> dict:
    steps: dict[int, dict] = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
                steps.setdefault(int(rec["step"]), {}).update(rec["data"])
            except (ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"{path} line {n}: not a file-logger record ({e})")
    keys = sorted({k for d in steps.values() for k in d if k.startswith("timing_s/")})
    warm = [d for s, d in sorted(steps.items()) if s >= warm_from]
    out = {"steps": len(steps), "step1": {k: round(steps[min(steps)][k], 3) for k in keys if k in steps[min(steps)]}
           if steps else {}}
    out["warm_median"] = {k: round(statistics.median(d[k] for d in warm if k in d), 3)
                          for k in keys if any(k in d for d in warm)}
    mem = {k: max(d[k] for d in steps.values() if k in d)
           for k in sorted({k for d in steps.values() for k in d if "memory" in k and "gb" in k.lower()})}
    out["peak_memory"] = {k: round(v, 2) for k, v in mem.items()}
    val = {s: {k: round(v, 4) for k, v in d.items() if k.startswith("val")} for s, d in sorted(steps.items())}
    out["validation"] = {s: v for s, v in val.items() if v}
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    warm = int(argv[argv.index("--warm-from") + 1]) if "--warm-from" in argv else 3
    print(json.dumps(summary(argv[0], warm), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
