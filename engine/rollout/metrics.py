"""Multi-turn metrics from the batch's `turns` meta (engine/rollout/trajectory.py `turns_record`):

    num_turns/{min,max,mean}         turns of the conversation: the prompt, each model turn, each tool answer
    tool_call_counts/{min,max,mean}  tool calls per trajectory;  tool_call_counts/<tool>: calls of that tool
    tool/use_fraction                trajectories with at least one call
    tool/error_rate                  failed calls (error, timeout, unreadable call) / calls
    tool/latency_s/{mean,max}        seconds per call
"""
from __future__ import annotations

from collections import Counter

from engine.protocol import Batch


def agent_metrics(batch: Batch, prefix: str = "") -> dict[str, float]:
    if "turns" not in batch:
        return {}
    per_row = [list(t) for t in batch["turns"]]
    if not per_row:
        return {}
    turns = [1 + len(t) for t in per_row]
    calls = [[s for s in t if s["role"] == "tool"] for t in per_row]
    counts = [len(c) for c in calls]
    flat = [s for c in calls for s in c]
    m = {f"{prefix}num_turns/min": float(min(turns)), f"{prefix}num_turns/max": float(max(turns)),
         f"{prefix}num_turns/mean": sum(turns) / len(turns),
         f"{prefix}tool_call_counts/min": float(min(counts)), f"{prefix}tool_call_counts/max": float(max(counts)),
         f"{prefix}tool_call_counts/mean": sum(counts) / len(counts),
         f"{prefix}tool/use_fraction": sum(c > 0 for c in counts) / len(counts)}
    by_tool: Counter = Counter()
    for s in flat:
        names = s.get("tool") if isinstance(s.get("tool"), list) else [s.get("tool")]
        by_tool.update(str(n) for n in names)
    for name, n in by_tool.items():
        m[f"{prefix}tool_call_counts/{name}"] = float(n)
    if flat:
        m[f"{prefix}tool/error_rate"] = sum(s.get("error") is not None for s in flat) / len(flat)
        latencies = [float(s.get("latency_s") or 0.0) for s in flat]
        m[f"{prefix}tool/latency_s/mean"] = sum(latencies) / len(latencies)
        m[f"{prefix}tool/latency_s/max"] = max(latencies)
    return m
