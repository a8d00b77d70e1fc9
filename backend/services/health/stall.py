"""The stalled-run check. With a heartbeat (engine/trainer/heartbeat.py: the phase the trainer entered, for which
step, since when) for a step not yet logged and that phase's usual time known (`timing_s/<phase>`): stalled when
it has been in the phase stall_factor x its median time; otherwise: no new step for stall_factor x the median step
time. Never sooner than stall_min_s.

Whose clock: the engine's host may be another machine whose clock is off (or jumps). So only differences of the
engine's own times are used — the median step time, from the points' wall times (the logger's, else the ingest
time), and how long a phase had already run when its heartbeat was sent (`sent` − `time`) — and every moment that
is compared with `now` is the server's own: when the newest step arrived (`received`) and when the heartbeat arrived,
less that age (store.py). A test plants old arrivals through store.clock instead of waiting."""
from __future__ import annotations

import math
import statistics

from backend.services.health.metric_checks import push
from backend.services.health.thresholds import n, t
from backend.services.health.tracker import Described, Judged

KEEP = 50  # step times kept for the median


def track(st: dict, step: int, wall: float, received: float | None = None) -> Judged | None:
    """A point at `step` arrived: a newer step records its time per step (`wall`, the engine's clock) and when it
    arrived (`received`, the server's clock; default `wall`); returns the judgement that the run is moving (which
    clears a stall)."""
    last = st.get("step")
    if last is not None and step <= last:
        return None
    if last is not None and wall > st["wall"]:
        push(st.setdefault("durations", []), (wall - st["wall"]) / (step - last), KEEP)
    st["step"], st["wall"], st["received"] = step, wall, wall if received is None else received
    return Judged("stalled", "error", [(step, False)], lambda s: Described("Run moving", ""))


PHASES = "timing_s/"
KEEP_PHASE = 9  # each phase's latest times, for its median


def note_phases(st: dict, points: dict[str, list[tuple[int, float]]]) -> None:
    """Each phase's newest times (`timing_s/<phase>`), for how long it usually takes."""
    for key, pts in points.items():
        if key.startswith(PHASES):
            ring = st.setdefault("phases", {}).setdefault(key[len(PHASES):], [])
            for _, v in pts:
                if math.isfinite(v) and v >= 0:
                    push(ring, v, KEEP_PHASE)


def judge(st: dict, now: float, heartbeat: dict | None) -> Judged | None:
    durations = st.get("durations", [])
    if st.get("step") is None or len(durations) < n("stall_min_steps"):
        return None
    median = statistics.median(durations)
    limit = max(t("stall_min_s"), t("stall_factor") * median)
    idle = now - st.get("received", st["wall"])  # a state saved before `received` was kept: its wall time
    beat = heartbeat or {}
    phase, began = beat.get("phase"), beat.get("time")
    current = phase is not None and began is not None and (beat.get("step") is None or beat["step"] > st["step"])
    usual = st.get("phases", {}).get(phase) if current else None
    values = {"idle_s": round(idle, 1), "median_step_s": round(median, 3), "limit_s": round(limit, 1)}
    if current:
        values["phase_s"] = round(now - began, 1)
    if usual and len(usual) >= n("stall_min_steps"):  # the phase's own clock: slow and hung differ there
        typical = statistics.median(usual)
        phase_limit = max(t("stall_min_s"), t("stall_factor") * typical)
        values.update(phase_median_s=round(typical, 3), phase_limit_s=round(phase_limit, 1))
        bad = now - began > phase_limit
        why = (f"It has been in phase '{phase}' for {now - began:.0f} s, {t('stall_factor'):g}x its median time "
               f"(timing_s/{phase}: {typical:.1f} s) being {phase_limit:.0f} s; no step since step {st['step']} for "
               f"{idle:.0f} s.")
    else:
        bad = idle > limit
        where = f" It is in phase '{phase}' since {now - began:.0f} s." if current else " No heartbeat names its phase."
        why = (f"No step since step {st['step']} for {idle:.0f} s, {t('stall_factor'):g}x the median step time "
               f"({median:.1f} s) being {limit:.0f} s.{where}")
    if current and beat.get("detail"):  # what the phase waits on, as the engine says it (async: the rollout's state)
        why += f" The engine says: {str(beat['detail'])[:300]}"
    return Judged("stalled", "error", [(st["step"], bad)], lambda s: Described(
        "Run stalled" + (f" in {phase}" if current else ""), why, None, values))
