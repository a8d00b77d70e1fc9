"""Judging, without the database: a batch's new points or answers and the run's state data -> what each check
judged, and the alarm trackers' changes. `hooks.py` reads the state, calls these and writes the outcome."""
from __future__ import annotations

import math
from itertools import pairwise
from operator import itemgetter
from typing import Any

from backend.services.health import sample_checks, stall
from backend.services.health.metric_checks import CHECKS, watched
from backend.services.health.state import State
from backend.services.health.tracker import AT_REST, Change, Judged, advance
from engine import metric_names as names

STEP_KEY = names.GLOBAL_STEP
_WATCHED: dict[str, bool] = {}  # key -> whether a check reads it (keys repeat every step: decide once)


def _watched(key: str) -> bool:
    found = _WATCHED.get(key)
    if found is None:
        found = _WATCHED[key] = key == STEP_KEY or watched(key)
    return found


def finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def context_of(cfg: dict | None) -> dict[str, Any]:
    """What the checks need from the run's resolved config, read once per run."""
    cfg = cfg or {}
    data = cfg.get("data") or {}
    arr = cfg.get("actor_rollout_ref") or {}
    actor, rollout = arr.get("actor") or {}, arr.get("rollout") or {}
    cap = rollout.get("response_length") or data.get("max_response_length")
    batch, mini = data.get("train_batch_size"), actor.get("ppo_mini_batch_size")
    one = isinstance(batch, int) and isinstance(mini, int) and batch <= mini and actor.get("ppo_epochs", 1) == 1
    return {"cap": cap if isinstance(cap, int) else None, "one_minibatch": one}


def points_of(rows, series, now: float) -> tuple[dict[str, list], dict[str, float]]:
    """The watched keys' points of a metrics batch, in step order, and per key the wall time of its newest point
    (the stall check's clock): from `rows` ((key, step, value, wall_time); NaN as None), or for a plain columnar
    batch (each key once, finite values) its `series`, read a key at a time (a series without wall times arrived
    `now`)."""
    points: dict[str, list] = {}
    walls: dict[str, float] = {}
    known = _WATCHED
    if series is not None:
        for s in series:
            w = known.get(s.key)
            if w is None:
                w = _watched(s.key)
            if w and s.steps:
                pts = list(zip(s.steps, s.values))
                if any(a[0] >= b[0] for a, b in pairwise(pts)):
                    pts.sort()
                points[s.key] = pts
                walls[s.key] = s.wall_times[s.steps.index(pts[-1][0])] if s.wall_times else now
    else:
        timed: dict[str, list] = {}
        for key, step, value, wall in rows:
            w = known.get(key)
            if w is None:
                w = _watched(key)
            if w:
                timed.setdefault(key, []).append((step, math.nan if value is None else value, wall))
        for key, pts in timed.items():
            pts.sort(key=itemgetter(0))
            points[key] = [(s, v) for s, v, _ in pts]
            walls[key] = pts[-1][2]
    return points, walls


def judge_points(data: dict, points: dict[str, list], walls: dict[str, float], ctx: dict,
                 received: float) -> list[Judged]:
    """Every metric check over the points not judged before (a resend of judged steps is history); `data` is the
    run's state data, which the checks advance."""
    seen = data.setdefault("seen", {})
    newest = None
    for key in list(points):
        pts, last = points[key], seen.get(key, -1)
        if pts[0][0] <= last:
            pts = points[key] = [p for p in pts if p[0] > last]
            if not pts:
                del points[key]
                continue
        seen[key] = pts[-1][0]
        if newest is None or pts[-1][0] > newest[0]:
            newest = (pts[-1][0], walls[key])
    judged: list[Judged] = []
    for name, check in CHECKS.items():
        judged += check(data.setdefault(name, {}), points, ctx)
    stall.note_phases(data.setdefault("stall", {}), points)
    if newest is not None:
        moving = stall.track(data.setdefault("stall", {}), *newest, received=received)
        if moving is not None:
            judged.append(moving)
    return judged


def answer_of(s) -> sample_checks.Answer:
    """A stored answer (SampleIn) as the sample checks read it."""
    calls, turns = (0, 0) if s.turns is None else sample_checks.tool_use(s.turns)
    return sample_checks.Answer(step=s.step, index=s.sample_index, response=s.response or "", tokens=s.tokens,
                                score=s.score if s.score is not None else s.reward,
                                group=s.group_uid or (None if s.prompt_index is None else f"p{s.prompt_index}"),
                                prompt_index=s.prompt_index, multi_turn=s.turns is not None, tool_calls=calls,
                                turns=turns)


def heartbeat_of(phase: str, beat: dict, received: float) -> dict:
    """The state's `heartbeat`: the phase, when it began on the server's clock (the beat's arrival, less how long
    the phase had run when the engine sent it: `sent` − `time`, both the engine's clock, so their difference holds
    whatever its offset), its step, and what it waits on (the async trainer's wait_rollout)."""
    sent, began = beat.get("sent"), beat.get("time")
    age = sent - began if finite(sent) and finite(began) else 0.0
    out = {"phase": phase[:100], "time": received - min(max(age, 0.0), 24 * 3600.0),
           "step": beat.get("step") if isinstance(beat.get("step"), int) else None}
    if isinstance(beat.get("detail"), str):
        out["detail"] = beat["detail"][:300]
    return out


def advance_all(row: State, judged: list[Judged]) -> list[Change]:
    """The alarm trackers (in the state) moved by what was judged: their fire / refine / clear changes."""
    trackers = row.data.setdefault("alarms", {})
    changes: list[Change] = []
    for j in judged:
        changes += advance(trackers.setdefault(j.alarm, list(AT_REST)), j)
        if j.steps and (row.checked_step is None or j.steps[-1][0] > row.checked_step):
            row.checked_step = j.steps[-1][0]
    return changes
