"""Invariants every correct setup meets (issue 28), so a broken one shows at its first step:

- `step1-kl`: with the reference equal to the initial actor, KL to it is 0 at step 1 (at most step1_kl_max);
- `step1-clip`: where a step is one on-policy mini-batch (train_batch_size <= ppo_mini_batch_size, one epoch) the
  importance ratio is 1 and nothing clips (at most step1_clipfrac_max);
- `rollout-mismatch`: the rollout engine's log-probs agree with the actor's (at most rollout_mismatch_max) — at every
  step, since a weight refit can break at any sync.

How a failed step-one check ends (decided for issue 28). It is a finding about the run's setup: the user must see
it, but a 'firing' badge that lasts the whole run on a run that then trains fine is noise. So each fires at the
step it was found (since_step 1: the banner, the stream, the Runs badge; an auto-stop rule naming it cancels the run
at once, autostop.py, since a one-step check never "holds N steps"), and then:
- `step1-clip` is judged again at every later step until one meets the invariant, where it clears: with one
  mini-batch and one epoch every step's only mini-batch is on-policy, so the same quantity is checked in band. While
  every step clips, the fault persists (the old log-probs never match the actor's) and it stays firing;
- `step1-kl` has no later step whose value is known (the actor leaves the reference by design): it is a one-time
  finding, cleared at the run's next step that logs KL. The run page keeps a cleared step-one alarm in view as a
  failed setup check (frontend/src/pages/run/HealthPanel.tsx), not in the quiet list of alarms that went away;
- `rollout-mismatch` is judged at every step and clears at the first step under its threshold.
Only a run that logs step 1 is judged for the step-one pair: a resumed run starts later, its step one was its
parent's.
"""
from __future__ import annotations

import math

from backend.services.health.thresholds import t
from backend.services.health.tracker import Described, Judged
from engine import metric_names as names

KL_KEYS = (names.KL_IN_REWARD, names.KL_LOSS)  # KL to the reference: in the reward (PPO) or as a loss
CLIPFRAC = names.PG_CLIPFRAC
MISMATCH_KEYS = (names.ROLLOUT_LOG_PROBS_ABSDIFF, names.ROLLOUT_PROBS_DIFF_MEAN)
ONCE = frozenset({"step1-kl", "step1-clip"})  # judged at step 1: an auto-stop rule needs no run of N steps for them
FIRST_STEP = 1


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _fmt(v) -> str:
    return f"{v:.4g}" if _finite(v) else str(v)


def _num(v) -> float:
    """A number for `values` (JSON has no NaN / Inf; the detail says which it was)."""
    return float(v) if _finite(v) else 0.0


def _kl(st: dict, points: dict, out: list[Judged]) -> None:
    found = {key: points[key] for key in KL_KEYS if points.get(key)}
    if not found or st.get("kl") == "done":
        return
    if st.get("kl") is None:  # step one not judged yet: its first KL point
        first = min(pts[0][0] for pts in found.values())
        at_one = {key: v for key, pts in found.items() for s, v in pts[:1] if s == FIRST_STEP}
        if first != FIRST_STEP or not at_one:
            st["kl"] = "done"  # the run's KL starts later (a resumed run): no step one to judge
            return
        bad = {key: v for key, v in at_one.items() if not (abs(v) <= t("step1_kl_max"))}  # NaN is bad
        st["kl"] = "open" if bad else "done"
        st["kl_found"] = {key: v if math.isfinite(v) else str(v) for key, v in bad.items()}  # stored as JSON
        steps = [(FIRST_STEP, bool(bad))]
        later = [s for pts in found.values() for s, _ in pts if s > FIRST_STEP]
        if bad and later:  # the next step arrived in the same batch: the finding is closed there
            steps.append((min(later), False))
            st["kl"] = "done"
    else:  # open: the finding closes at the next step that logs KL
        later = [s for pts in found.values() for s, _ in pts if s > FIRST_STEP]
        if not later:
            return
        steps = [(min(later), False)]
        st["kl"] = "done"
    bad = st["kl_found"]

    def describe(step: int) -> Described:
        key, v = next(iter(bad.items()))
        return Described(
            "KL is not 0 at the first step",
            f"{key} = {_fmt(v)} at step {FIRST_STEP}, the first update; the reference is the initial actor, so it must "
            f"be 0 (at most {t('step1_kl_max'):g}): the reference or the actor did not load the same weights, or the "
            "log-probs are computed differently. A setup finding, checked once: later steps' KL is not expected to be "
            "0.", key, {k: _num(x) for k, x in bad.items()}, {"step": FIRST_STEP, "filter": None})
    out.append(Judged("step1-kl", "error", steps, describe))


def _clip(st: dict, points: dict, ctx: dict, out: list[Judged]) -> None:
    pts = points.get(CLIPFRAC)
    if not pts or not ctx.get("one_minibatch") or st.get("clip") == "done":
        return
    limit = t("step1_clipfrac_max")
    if st.get("clip") is None:
        if pts[0][0] != FIRST_STEP:
            st["clip"] = "done"  # no step one logged here
            return
        st["clip"] = "open"
    seen: dict[int, float] = {}
    steps = []
    for step, v in pts:
        is_bad = not (v <= limit)  # NaN is bad
        seen[step] = v
        steps.append((step, is_bad))
        if not is_bad:  # in band again (or from the start): nothing left to judge
            st["clip"] = "done"
            break

    def describe(step: int) -> Described:
        v = seen.get(step, math.nan)
        return Described(
            "Clipping on the first on-policy mini-batch",
            f"{CLIPFRAC} = {_fmt(v)} at step {step}: with one mini-batch and one epoch per step, each step's "
            "mini-batch is on-policy, its importance ratio is 1 and nothing may clip; the old log-probs do not match "
            "the actor's.", CLIPFRAC, {CLIPFRAC: _num(v)}, {"step": step, "filter": None})
    out.append(Judged("step1-clip", "error", steps, describe))


def step_one(st: dict, points: dict, ctx: dict) -> list[Judged]:
    out: list[Judged] = []
    _kl(st, points, out)
    _clip(st, points, ctx, out)
    return out


def rollout_mismatch(st: dict, points: dict, ctx: dict) -> list[Judged]:
    """Every step; with both keys logged a step is bad when either is over (one judgement per step: two would
    replace each other's)."""
    limit = t("rollout_mismatch_max")
    at: dict[int, dict[str, float]] = {}
    for key in MISMATCH_KEYS:
        for step, v in points.get(key, ()):
            at.setdefault(step, {})[key] = v
    if not at:
        return []
    # an infinite mismatch is a step with nothing to compare (no rollout log-probs): not judged bad
    steps = [(s, any(v > limit and v != math.inf for v in vs.values())) for s, vs in sorted(at.items())]

    def describe(step: int) -> Described:
        vs = at.get(step, {})
        key, v = max(((k, x) for k, x in vs.items() if not math.isnan(x)), key=lambda kv: kv[1],
                     default=(MISMATCH_KEYS[0], 0.0))
        return Described(
            "Rollout and actor disagree",
            f"{key} = {_fmt(v)} > {limit:g}: the rollout engine's log-probs differ from the actor's (1e-3 is fine; "
            "past 1-2% the weight sync is broken).", key, {k: _num(x) for k, x in vs.items()})
    return [Judged("rollout-mismatch", "error", steps, describe)]
