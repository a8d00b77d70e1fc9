"""Every ratio the benchmarks print, on wall time for both sides (engine/bench/README.md, "Ratios").

A side's own per-phase timers leave out what runs between its phases or steps (the trainer's bookkeeping, a
rollout that runs ahead, logging), and each system leaves out different things; only the wall clock between step
ends (or around a whole generation call) measures the same thing on both sides. So a ratio is refused (None, with
the reason) where either side lacks a wall figure rather than mixing a wall time with a timer.

    python -m engine.bench.ratios BENCH.jsonl ...       ratios vs TRL and plain vLLM from kept `--out` lines
    python -m engine.bench.ratios --verl VERL.log RL.log  rlstudio vs verl from two stamped console logs
"""
from __future__ import annotations

import argparse
import json
import sys


def wall_ratio(ours: float | None, theirs: float | None, other: str) -> dict:
    """rlstudio's wall seconds over the other side's: below 1 is faster. None with a note where a side has none."""
    if not ours or not theirs:
        missing = " and ".join(n for n, v in (("rlstudio", ours), (other, theirs)) if not v)
        return {f"rlstudio_over_{other}": None, f"speedup_vs_{other}": None, "basis": "wall",
                "note": f"no wall time between step ends for {missing} (output made before it was recorded, or no "
                        "step before the first timed one: --warmup >= 1)"}
    return {f"rlstudio_over_{other}": round(ours / theirs, 4), f"speedup_vs_{other}": round(theirs / ours, 3),
            "basis": "wall"}


def vs_trl(engine_wall: float | None, trl_wall: float | None, engine_timer: float | None = None,
           trl_timer: float | None = None) -> dict:
    """The `phase: ratio` line of `python -m engine.bench --vs-trl`: each side's time between step ends; the timer
    ratio beside it only for figures made before 2026-12-07."""
    line = {"phase": "ratio", "rlstudio_step_wall_s": engine_wall,
            "trl_step_wall_s": round(trl_wall, 4) if trl_wall else None, **wall_ratio(engine_wall, trl_wall, "trl")}
    if engine_timer and trl_timer:
        line |= {"rlstudio_step_s": engine_timer, "trl_step_s": round(trl_timer, 4),
                 "timer_ratio": round(engine_timer / trl_timer, 4)}
    return line


def vs_vllm(lines: list[dict]) -> list[dict]:
    """The rollout against plain vLLM: answer tokens per wall second of a whole generation call on both sides (the
    static decoder's `decode_variant` lines and the engine step's `gen` phase, vLLM's `gen` lines, each timed
    around the call). Tokens per second rather than seconds: W2's answers end at the end token, so the two sides'
    lengths differ."""
    ours = {r["variant"]: r for r in lines if r.get("phase") == "decode_variant" and r.get("impl") == "rlstudio"}
    ours |= {f"step gen{' ' + r['label'] if r.get('label') else ''}": r for r in lines
             if r.get("phase") == "gen" and r.get("impl") == "rlstudio"}
    theirs = {r["variant"]: r for r in lines if r.get("phase") == "gen" and r.get("impl") == "vllm"}
    out = []
    for name, mine in ours.items():
        for vname, other in theirs.items():
            a, b = mine.get("tokens_per_s"), other.get("tokens_per_s")
            out.append({"phase": "ratio", "workload": mine.get("workload"), "rlstudio": name, "vllm": vname,
                        "basis": "wall", "rlstudio_tokens_per_s": a, "vllm_tokens_per_s": b,
                        "rlstudio_over_vllm_tokens_per_s": round(a / b, 3) if a and b else None})
    return out


def from_lines(lines: list[dict]) -> list[dict]:
    """Every ratio the kept output lines of `python -m engine.bench` allow, per workload."""
    out = []
    for workload in dict.fromkeys(r.get("workload") for r in lines):
        mine = [r for r in lines if r.get("workload") == workload]
        wall = next((r["timing_s"] for r in mine if r.get("impl") == "rlstudio" and r.get("phase") == "step_wall"),
                    None)
        trl = next((r for r in mine if r.get("impl") == "trl" and r.get("phase") == "step"), None)
        if trl is not None:
            out.append({"workload": workload, **vs_trl(wall, trl.get("step_wall_s"))})
        out += vs_vllm(mine)
    return out


def vs_verl(verl_log: str, rl_log: str, warm_from: int = 3) -> dict:
    """rlstudio vs verl on the same command: the median wall time between step ends from `warm_from` on, and the
    time from launch to the first step, both read off the stamped console logs (step_clock.py), so one clock
    measures both systems."""
    from engine.bench.step_clock import summary

    verl, rl = summary(verl_log, warm_from), summary(rl_log, warm_from)
    return {"phase": "ratio", "vs": "verl", "verl_step_wall_s": verl["warm_wall_median_s"],
            "rlstudio_step_wall_s": rl["warm_wall_median_s"],
            **wall_ratio(rl["warm_wall_median_s"], verl["warm_wall_median_s"], "verl"),
            "verl_first_step_s": verl["first_step_s"], "rlstudio_first_step_s": rl["first_step_s"]}


def read_lines(path: str) -> list[dict]:
    """The JSON result lines of a kept output file; anything else in it (a device call's other output) is skipped."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith('{"'):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.ratios", description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+", help="bench output lines (JSONL); with --verl: the rlstudio run's log")
    p.add_argument("--verl", default=None, help="verl's stamped console log (device_verl.sh's LABEL.log)")
    p.add_argument("--warm-from", type=int, default=3)
    args = p.parse_args(argv)
    if args.verl:
        if len(args.files) != 1:
            p.error("--verl VERL.log takes exactly one rlstudio log")
        print(json.dumps(vs_verl(args.verl, args.files[0], args.warm_from)))
        return 0
    lines = []
    for path in args.files:
        try:
            lines += read_lines(path)
        except OSError as e:
            p.error(f"cannot read {path}: {e.strerror}")
    for line in from_lines(lines):
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
