"""The stale-rollout check (issue 27: the update reached the rollout, every step). After each weight sync the engine
compares a fingerprint of the weights its rollout samples from with the actor's (engine/rollout/freshness.py) and
logs `rollout/weights_stale` (1: the rollout is no nearer the actor's new weights than its old ones),
`rollout/weight_fingerprint_gap` (rollout vs actor, relative; a correct sync gives ~1e-16),
`rollout/actor_weight_change` (how far the actor moved since the previous sync, same units) and
`rollout/stale_params`. A step is bad when the engine flagged it or the gap exceeds stale_rollout_gap_max; the alarm
fires at the first bad step (verl #7495's run sampled from the base model for months) and clears at the first good
one."""
from __future__ import annotations

import math

from backend.services.health.thresholds import n, t
from backend.services.health.tracker import Described, Judged
from engine import metric_names as names

STALE = names.WEIGHTS_STALE
GAP = names.WEIGHT_FINGERPRINT_GAP
CHANGE = names.ACTOR_WEIGHT_CHANGE
PARAMS = names.STALE_PARAMS
KEYS = (STALE, GAP, CHANGE, PARAMS)


def stale_rollout(st: dict, points: dict[str, list[tuple[int, float]]], ctx: dict) -> list[Judged]:
    if not points.get(STALE) and not points.get(GAP):
        return []
    at = {key: dict(points.get(key, ())) for key in KEYS}
    limit = t("stale_rollout_gap_max")
    steps = []
    for step in sorted(at[STALE].keys() | at[GAP].keys()):
        flag, gap = at[STALE].get(step, math.nan), at[GAP].get(step, math.nan)
        # NaN compares False: a missing number judges nothing either way; an infinite gap (nothing compared) is bad
        # > 0: the driver averages workers, so one stale worker of four reads 0.25 where a check is not collective
        steps.append((step, flag > 0 or gap > limit))

    def describe(step: int) -> Described:
        gap, change = at[GAP].get(step, math.nan), at[CHANGE].get(step, math.nan)
        params = at[PARAMS].get(step, math.nan)
        values = {k: v for k, v in ((GAP, gap), (CHANGE, change), (PARAMS, params), (STALE, at[STALE].get(step)))
                  if v is not None and math.isfinite(v)}
        which = f"{params:.0f} parameters" if math.isfinite(params) else "its parameters"
        return Described(
            "Rollout is stale: the update did not reach it",
            f"After the weight sync of step {step} the rollout's weights are not the actor's ({which}): "
            f"{GAP} = {gap:.3g} while the actor moved {change:.3g} ({CHANGE}); a correct sync gives ~0. The rollout "
            "samples from old weights (a skipped sync, or a LoRA adapter that never reached vLLM): the training "
            "data is off-policy and the run learns from a model it is not training. Check the weight sync (the "
            "worker's log, timing_s/sync_weights) and the rollout's LoRA settings.", GAP, values,
            {"step": step, "filter": None})
    return [Judged("stale-rollout", "error", steps, describe, fire_after=n("stale_rollout_steps"))]
