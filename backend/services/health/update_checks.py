"""The actor-not-moving check (issue 27: a LoRA run must never silently train nothing). After each weight sync the
engine logs `rollout/actor_weight_change`: how far the actor's weights (LoRA merged: W + scale · B A) moved since the
previous sync, relative, from the same fingerprints as the stale-rollout check (engine/rollout/freshness.py). Frozen
weights give exactly 0; any real update gives far more than float64 rounding (one fp32 ulp of one fingerprinted
entry is ~1e-11 even in a 152k-row embedding). A step is bad when that change is at most actor_still_change_max
while the actor's learning rate (`actor/lr`, the last one logged) is above 0; a step with lr 0 (warm-up) is good,
one before any lr is known is not judged. The alarm fires after actor_still_steps bad steps in a row and clears at
the first step that moves. Its words use `actor/grad_norm` to tell the two causes apart: a zero gradient (no
learning signal) or a gradient that never reaches the weights (an adapter that does not train, an optimizer over
other parameters)."""
from __future__ import annotations

import math

from backend.services.health.thresholds import n, t
from backend.services.health.tracker import Described, Judged
from engine import metric_names as names

CHANGE = names.ACTOR_WEIGHT_CHANGE
LR = names.ACTOR_LR
GRAD = names.ACTOR_GRAD_NORM
KEYS = (CHANGE, LR)  # GRAD is watched already (every .../grad_norm is)


def actor_not_moving(st: dict, points: dict[str, list[tuple[int, float]]], ctx: dict) -> list[Judged]:
    changes, lrs = points.get(CHANGE, ()), points.get(LR, ())
    if not changes and not lrs:
        return []
    lr_at, grad_at = dict(lrs), dict(points.get(GRAD, ()))
    limit = t("actor_still_change_max")
    steps, seen = [], {}
    last_lr = st.get("lr")
    for step, change in changes:
        lr = lr_at.get(step, last_lr)  # the same step's lr, else the last one logged before it
        last_lr = lr
        if lr is None or not math.isfinite(lr) or not math.isfinite(change):
            continue  # nothing known to judge by
        steps.append((step, lr > 0 and change <= limit))
        seen[step] = (change, lr, grad_at.get(step))
    if lrs:
        st["lr"] = max(lrs)[1]  # the newest step's lr, for changes that arrive in a later batch
    elif last_lr is not None:
        st["lr"] = last_lr
    if not steps:
        return []
    k = n("actor_still_steps")

    def describe(step: int) -> Described:
        change, lr, grad = seen[step]
        values = {CHANGE: change, LR: lr, **({GRAD: grad} if grad is not None and math.isfinite(grad) else {})}
        if grad is not None and grad == 0:
            cause = (f"{GRAD} = 0: the gradient is zero, so there is no learning signal (every answer of every "
                     "group scored alike: see no-signal; easier prompts or more answers per prompt)")
        elif grad is not None and math.isfinite(grad):
            cause = (f"{GRAD} = {grad:.3g}: a gradient exists but never reaches the weights (a LoRA adapter whose "
                     "parameters do not train, an optimizer over other parameters, a frozen module)")
        else:
            cause = ("the updates never reach the weights (a LoRA adapter whose parameters do not train, an optimizer "
                     "over other parameters) or the gradient is zero (no learning signal)")
        return Described(
            "Actor is not moving: training changes nothing",
            f"{CHANGE} = {change:.3g} (at most {limit:g}) for {k}+ steps in a row up to step {step}, while {LR} = "
            f"{lr:.3g} > 0: the actor's weights (a LoRA adapter merged) did not change, so the run trains nothing. "
            f"{cause[0].upper()}{cause[1:]}.", CHANGE, values, {"step": step, "filter": None})
    return [Judged("actor-not-moving", "error", steps, describe, fire_after=k)]
