"""The stalled-run check: no new step for stall_factor x the median step time. Step times come from the wall
times of the points (the logger's, or the ingest time), so the judgement compares stored times with `now`: a test
plants points with old wall times instead of waiting. The phase comes from the worker's latest heartbeat."""
from __future__ import annotations

import statistics

from backend.services.health.metric_checks import push
from backend.services.health.thresholds import n, t
from backend.services.health.tracker import Described, Judged

KEEP = 50  # step times kept for the median


def track(st: dict, step: int, wall: float) -> Judged | None:
    """A point at `step` arrived: a newer step records its time per step; returns the judgement that the run is
    moving (which clears a stall)."""
    last = st.get("step")
    if last is not None and step <= last:
        return None
    if last is not None and wall > st["wall"]:
        push(st.setdefault("durations", []), (wall - st["wall"]) / (step - last), KEEP)
    st["step"], st["wall"] = step, wall
    return Judged("stalled", "error", [(step, False)], lambda s: Described("Run moving", ""))


def judge(st: dict, now: float, heartbeat: dict | None) -> Judged | None:
    durations = st.get("durations", [])
    if st.get("step") is None or len(durations) < n("stall_min_steps"):
        return None
    median = statistics.median(durations)
    limit = max(t("stall_min_s"), t("stall_factor") * median)
    idle = now - st["wall"]
    phase = (heartbeat or {}).get("phase")
    where = f" It is in phase '{phase}' since {now - heartbeat['time']:.0f} s." if phase else \
        " No heartbeat names its phase."
    values = {"idle_s": round(idle, 1), "median_step_s": round(median, 3), "limit_s": round(limit, 1)}
    if heartbeat and heartbeat.get("time") is not None:
        values["phase_s"] = round(now - heartbeat["time"], 1)
    return Judged("stalled", "error", [(st["step"], idle > limit)], lambda s: Described(
        "Run stalled" + (f" in {phase}" if phase else ""),
        f"No step since step {s} for {idle:.0f} s, {t('stall_factor'):g}x the median step time ({median:.1f} s) being "
        f"{limit:.0f} s.{where}", None, values))
