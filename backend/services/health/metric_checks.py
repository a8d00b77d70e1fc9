"""Checks over metric points. Each is a small function of (its own state, the new points of the keys it reads,
the run's context) -> judgements (`Judged`: per alarm, each new step it can judge, bad or good, and how to describe
the alarm at a step); its state holds only what the next points need (a few window values, a best mean), so the
cost is the new points, not the run's length. `points` maps a key to its new (step, value) pairs in step order
(NaN for NaN)."""
from __future__ import annotations

import math
import re
from collections.abc import Callable

from backend.services.health.invariant_checks import CLIPFRAC, KL_KEYS, MISMATCH_KEYS, rollout_mismatch, step_one
from backend.services.health.rollout_checks import KEYS as ROLLOUT_KEYS
from backend.services.health.rollout_checks import stale_rollout
from backend.services.health.thresholds import n, t
from backend.services.health.tracker import Described, Judged
from backend.services.health.update_checks import KEYS as UPDATE_KEYS
from backend.services.health.update_checks import actor_not_moving
from engine import metric_names as names

Points = dict[str, list[tuple[int, float]]]

SKIP_KEYS = names.SKIPPED_STEP_KEYS  # 1: the optimizer step was skipped
NONFINITE_KEY = re.compile(r"(loss|grad_norm)(/|$)")
SCORE = names.SCORE
ENTROPY = names.ENTROPY
LENGTH = names.RESPONSE_LENGTH
CLIP = names.RESPONSE_CLIP_RATIO
VALUES_STD = names.VALUES_STD
TOOL_CALLS = names.TOOL_CALLS
TURNS = names.TURNS
VAL_SCORE = names.VAL_SCORE  # the held-out score: the core variable's mean@N
# the engine's share of GRPO groups whose rewards are all equal, under whatever name it logs it
NO_SIGNAL_KEY = re.compile(r"^(?!val).*(zero[_-]?var|zero[_-]?std|all[_-]?equal|no[_-]?signal)")

FIXED_KEYS = frozenset({*KL_KEYS, *SKIP_KEYS, SCORE, ENTROPY, LENGTH, CLIP, VALUES_STD, CLIPFRAC, *MISMATCH_KEYS,
                        TOOL_CALLS, TURNS, *ROLLOUT_KEYS, *UPDATE_KEYS})


def watched(key: str) -> bool:
    """Whether any check reads `key` (ingest hands the checks only these)."""
    return (key in FIXED_KEYS or NONFINITE_KEY.search(key) is not None or key.startswith((names.VAL_CORE_PREFIX, names.TIMING_PREFIX))
            or NO_SIGNAL_KEY.search(key) is not None)


def finite(v: float) -> bool:
    return v is not None and math.isfinite(v)


def mean(values) -> float | None:
    good = [v for v in values if finite(v)]
    return sum(good) / len(good) if good else None


def push(ring: list, item, size: int) -> None:
    ring.append(item)
    del ring[:-size]


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def _lookup(pairs: list[tuple[int, float]]) -> Callable[[int], float]:
    """The value at a step, for describing an alarm (built on first use: most batches change no alarm)."""
    table: dict[int, float] = {}

    def at(step: int) -> float:
        if not table:
            table.update(pairs)
        return table.get(step, math.nan)
    return at


def _num(v: float | None) -> float:
    """A number for `values` (JSON has no NaN / Inf; the title says which it was)."""
    return v if finite(v) else 0.0


# -------------------------------------------------------------------------------- ported from the UI
def skipped(st: dict, points: Points, ctx: dict) -> list[Judged]:
    out = []
    for key in SKIP_KEYS:
        pts = points.get(key)
        if not pts:
            continue
        role = key.split("/")[0]
        s = st.setdefault(role, {"steps": [], "count": 0})
        steps = []
        for step, v in pts:
            bad = v > 0  # NaN > 0 is False
            if bad:
                s["count"] += 1
                if len(s["steps"]) < 6:
                    s["steps"].append(step)
            steps.append((step, bad))
        count = s["count"]
        listed = ", ".join(map(str, s["steps"])) + (", ..." if count > len(s["steps"]) else "")

        def describe(step, key=key, role=role, count=count, listed=listed):
            return Described(
                f"{role.capitalize()} update skipped at {count} step{'s' * (count != 1)}",
                f"{key} = 1 at steps {listed}: the gradient was NaN or Inf, so the optimizer step was skipped and the "
                "weights did not change (lower the learning rate, check grad clipping and the loss).", key,
                {key: 1.0, "skipped_steps": float(count)}, {"step": step, "filter": None})
        out.append(Judged(f"skipped:{role}", "error", steps, describe, clear_after=n("clear_steps")))
    return out


def nonfinite(st: dict, points: Points, ctx: dict) -> list[Judged]:
    skips = {(k.split("/")[0], step) for k in SKIP_KEYS for step, v in points.get(k, ()) if v > 0}
    isfinite, out = math.isfinite, []
    for key, pts in points.items():
        if not NONFINITE_KEY.search(key):
            continue
        role = key.split("/")[0] if key.endswith("/grad_norm") and skips else None
        # a non-finite grad norm at a skipped step is the skip itself, reported as such
        steps = [(s, not isfinite(v)) for s, v in pts if role is None or (role, s) not in skips]

        at = _lookup(pts)

        def describe(step, key=key, at=at):
            word = "NaN" if math.isnan(at(step)) else "Inf"
            return Described(f"{word} in {key}", f"{key} is {word} at step {step}: the update diverged (lower the "
                             "learning rate, check grad clipping).", key, {"at_step": float(step)},
                             {"step": step, "filter": None})
        out.append(Judged(f"nonfinite:{key}", "error", steps, describe, clear_after=n("clear_steps")))
    return out


def kl(st: dict, points: Points, ctx: dict) -> list[Judged]:
    key = st.get("key") or next((k for k in KL_KEYS if k in points), None)
    if key is None:
        return []
    st["key"] = key
    pts = points.get(key)
    if not pts:
        return []
    high, low, grace, at = t("kl_high"), t("kl_low"), n("kl_low_grace_steps"), _lookup(pts)
    isfinite = math.isfinite

    def describe_high(step):
        return Described(f"KL above {high:g}", f"{key} > {high:g} for {n('kl_steps')}+ steps: the policy drifts from "
                         "the reference (raise the KL coefficient or lower the learning rate).", key,
                         {key: _num(at(step))})

    def describe_low(step):
        return Described(f"KL below {low:g}", f"{key} < {low:g} for {n('kl_steps')}+ steps: the policy barely moves "
                         "(learning rate too low, or KL too strong).", key, {key: _num(at(step))})
    return [Judged("kl-high", "warning", [(s, v > high) for s, v in pts], describe_high, fire_after=n("kl_steps")),
            Judged("kl-low", "warning", [(s, isfinite(v) and v < low) for s, v in pts if s > grace], describe_low,
                   fire_after=n("kl_steps"))]


def _streak_check(alarm: str, key: str, bad: Callable[[float], bool], steps: str, title: str, detail: str):
    def check(st: dict, points: Points, ctx: dict) -> list[Judged]:
        pts = points.get(key)
        if not pts:
            return []
        at = _lookup(pts)
        return [Judged(alarm, "warning", [(s, math.isfinite(v) and bad(v)) for s, v in pts],
                       lambda step: Described(title, detail, key, {key: _num(at(step))}), fire_after=n(steps))]
    return check


values_flat = _streak_check(
    "values-flat", VALUES_STD, lambda v: v < t("values_std_min"), "values_std_steps", "Critic values have no spread",
    f"{VALUES_STD} < {t('values_std_min'):g} for {n('values_std_steps')}+ steps: the critic predicts a constant "
    "(check critic lr, warmup).")
clip_ratio = _streak_check(
    "clip-ratio", CLIP, lambda v: v > t("clip_ratio_max"), "clip_steps", "Responses hit the length limit",
    f"{CLIP} > {t('clip_ratio_max'):g} for {n('clip_steps')}+ steps: most answers are cut off (raise "
    "max_response_length, or the model is rambling).")


def _window_mean(values: list) -> float | None:
    if None not in values:
        return sum(values) / len(values)
    good = [v for v in values if v is not None]
    return sum(good) / len(good) if good else None


def score_collapse(st: dict, points: Points, ctx: dict) -> list[Judged]:
    """The UI's rule, kept incrementally: the last 2 x window values; each value makes one more window old enough
    to be a candidate best (it ends before the recent window starts)."""
    pts = points.get(SCORE)
    if not pts:
        return []
    w, ratio, least, isfinite = n("score_window"), t("score_drop_ratio"), t("score_min_best"), math.isfinite
    ring_steps, ring = st.setdefault("steps", []), st.setdefault("values", [])  # NaN as None
    best, best_step = st.get("best"), st.get("best_step")
    steps, seen = [], {}
    for step, v in pts:
        ring_steps.append(step)
        ring.append(v if isfinite(v) else None)
        if len(ring) > 2 * w:
            del ring_steps[0], ring[0]
        elif len(ring) < 2 * w:
            continue
        candidate = _window_mean(ring[:w])
        if candidate is not None and (best is None or candidate > best):
            best, best_step = candidate, ring_steps[0]
        recent = _window_mean(ring[w:])
        steps.append((step, best is not None and best >= least and recent is not None and recent < best * ratio))
        seen[step] = (ring_steps[w], best, best_step, recent)
    st["best"], st["best_step"] = best, best_step

    def describe(step):
        _, best, best_step, recent = seen[step]
        return Described("Score collapsed", f"{SCORE} fell from {_fmt(best)} (around step {best_step}) to "
                         f"{_fmt(recent)}: check the samples for degenerate answers; lower the learning rate.", SCORE,
                         {"best": best or 0.0, "recent": recent or 0.0}, {"step": step, "filter": None})
    return [Judged("score-collapse", "error", steps, describe, since=lambda step: seen[step][0])] if steps else []


# ------------------------------------------------------------------------------------- new checks
def entropy_collapse(st: dict, points: Points, ctx: dict) -> list[Judged]:
    w = n("entropy_window")
    scores = st.setdefault("scores", [])
    for _, v in points.get(SCORE, ()):
        if math.isfinite(v):
            if len(st.setdefault("score_start", [])) < w:
                st["score_start"].append(v)
            push(scores, v, w)
    pts = points.get(ENTROPY)
    if not pts:
        return []
    ring, start, steps, seen = st.setdefault("ring", []), st.setdefault("start", []), [], {}
    s0, s = mean(st.get("score_start", [])), mean(scores)  # the score now: the newest window of this batch
    risen = s0 is not None and s is not None and s - s0 >= t("score_rise_min")
    ratio = t("entropy_collapse_ratio")
    for step, v in pts:
        if not math.isfinite(v):
            continue
        if len(start) < w:
            start.append(v)
            continue
        push(ring, v, w)
        e0, e = sum(start) / w, sum(ring) / len(ring)
        steps.append((step, e0 > 0 and e < ratio * e0 and not risen))
        seen[step] = (e, e0)

    def describe(step):
        e, e0 = seen[step]
        return Described(
            "Entropy collapsed", f"{ENTROPY} fell to {_fmt(e)} from {_fmt(e0)} at the start (below {ratio:g}x) while the "
            f"score went from {_fmt(s0)} to {_fmt(s)}: the policy stopped exploring without learning (raise the "
            "entropy coefficient or the temperature, lower the learning rate).", ENTROPY,
            {"entropy": e, "entropy_start": e0, "score": s or 0.0, "score_start": s0 or 0.0},
            {"step": step, "filter": None})
    return [Judged("entropy-collapse", "warning", steps, describe)] if steps else []


def held_out(st: dict, points: Points, ctx: dict) -> list[Judged]:
    """At each validation, against the previous one: response length rising while the held-out score does not
    (length hacking), and the training score rising while the held-out score falls (divergence)."""
    w = n("score_window")
    for key, ring in ((SCORE, "scores"), (LENGTH, "lengths")):
        for _, v in points.get(key, ()):
            if math.isfinite(v):
                push(st.setdefault(ring, []), v, w)
    key = st.get("key")
    if key is None:
        found = sorted(k for k in points if k.startswith(names.VAL_CORE_PREFIX))
        key = next((k for k in found if VAL_SCORE.match(k)), found[0] if found else None)
        if key is None:
            return []
        st["key"] = key
    rising, diverging, seen = [], [], {}
    for step, v in points.get(key, ()):
        if not math.isfinite(v):
            continue
        now = {"step": step, "val": v, "train": mean(st.get("scores", [])), "length": mean(st.get("lengths", []))}
        prev, st["prev"] = st.get("prev"), now
        if prev is None or step <= prev["step"]:
            continue
        seen[step] = (prev, now)
        if prev["length"] and now["length"] is not None:
            rising.append((step, now["length"] >= t("length_rise_ratio") * prev["length"]
                           and v - prev["val"] < t("heldout_rise_min")))
        if prev["train"] is not None and now["train"] is not None:
            delta = t("divergence_min_delta")
            diverging.append((step, now["train"] - prev["train"] >= delta and prev["val"] - v >= delta))

    def describe_rising(step):
        prev, now = seen[step]
        return Described(
            "Answers grow longer, held-out score does not",
            f"{LENGTH} went from {_fmt(prev['length'])} (validation at step {prev['step']}) to {_fmt(now['length'])} "
            f"while {key} went from {_fmt(prev['val'])} to {_fmt(now['val'])}: length hacking (the reward pays for "
            "length; check the samples, add a length penalty).", LENGTH,
            {"length": now["length"], "length_before": prev["length"], "heldout": now["val"],
             "heldout_before": prev["val"]}, {"step": step, "filter": None})

    def describe_diverging(step):
        prev, now = seen[step]
        return Described(
            "Training score up, held-out down",
            f"Between the validations at steps {prev['step']} and {step} the training score rose {_fmt(prev['train'])} "
            f"-> {_fmt(now['train'])} while {key} fell {_fmt(prev['val'])} -> {_fmt(now['val'])}: over-fitting or "
            "reward hacking.", key,
            {"train": now["train"], "train_before": prev["train"], "heldout": now["val"], "heldout_before": prev["val"]})
    out = []
    if rising:
        out.append(Judged("length-rising", "warning", rising, describe_rising))
    if diverging:
        out.append(Judged("train-heldout-divergence", "warning", diverging, describe_diverging))
    return out


def no_signal_metric(st: dict, points: Points, ctx: dict) -> list[Judged]:
    """The engine's own share of zero-variance groups, when it logs one (samples give it otherwise)."""
    key = st.get("key") or next((k for k in sorted(points) if NO_SIGNAL_KEY.search(k)), None)
    if key is None:
        return []
    st["key"] = key
    ctx["no_signal_from_metric"] = True
    ring, steps, seen = st.setdefault("ring", []), [], {}
    for step, v in points.get(key, ()):
        if math.isfinite(v):
            push(ring, v, n("no_signal_window"))
            trend = sum(ring) / len(ring)
            steps.append((step, trend >= t("no_signal_share")))
            seen[step] = (trend, v)
    return [no_signal(steps, lambda step: seen[step], key)] if steps else []


def no_signal(steps: list[tuple[int, bool]], numbers: Callable[[int], tuple[float, float]], key: str | None) -> Judged:
    def describe(step):
        trend, share = numbers(step)
        return Described(
            "Groups without learning signal",
            f"{share:.0%} of GRPO groups at step {step} (mean {trend:.0%} over the last {n('no_signal_window')} "
            "steps) scored every answer alike: their advantages are 0 and they teach nothing (harder or easier "
            "prompts, more answers per prompt, or filter_groups).", key, {"share": share, "trend": trend},
            {"step": step, "filter": None})
    return Judged("no-signal", "warning", steps, describe)


def tool_collapse(st: dict, points: Points, ctx: dict) -> list[Judged]:
    w = n("tool_window")
    if points.get(TOOL_CALLS):
        ctx["tool_calls_from_metric"] = True  # the answers' own count (sample_checks.py) steps aside
    for _, v in points.get(TURNS, ()):
        if math.isfinite(v):
            st["turns"] = v
    ring, steps, seen = st.setdefault("ring", []), [], {}
    for step, v in points.get(TOOL_CALLS, ()):
        if not math.isfinite(v):
            continue
        push(ring, v, w)
        if len(ring) < w:
            continue
        recent = sum(ring) / w
        if st.get("peak") is None or recent > st["peak"]:
            st["peak"], st["peak_step"] = recent, step
        peak = st["peak"]
        steps.append((step, peak >= t("tool_min_peak") and recent <= t("tool_collapse_ratio") * peak))
        seen[step] = (recent, peak, st.get("peak_step"))
    turns = st.get("turns")

    def describe(step):
        recent, peak, peak_step = seen[step]
        return Described(
            "Tool use collapsed", f"{TOOL_CALLS} fell to {_fmt(recent)} from {_fmt(peak)} (around step {peak_step}); "
            f"turns per trajectory {_fmt(turns)}: the model stopped calling its tools.", TOOL_CALLS,
            {"tool_calls": recent, "tool_calls_peak": peak, **({"turns": turns} if turns is not None else {})},
            {"step": step, "filter": "uses_tool=false"})
    return [Judged("tool-collapse", "warning", steps, describe)] if steps else []


# every check keeps its own state (none reads another's)
CHECKS: dict[str, Callable[[dict, Points, dict], list[Judged]]] = {
    "skipped": skipped, "nonfinite": nonfinite, "kl": kl, "values-flat": values_flat, "clip-ratio": clip_ratio,
    "score-collapse": score_collapse, "entropy-collapse": entropy_collapse, "held-out": held_out,
    "step-one": step_one, "rollout-mismatch": rollout_mismatch, "no-signal-metric": no_signal_metric,
    "tool-collapse": tool_collapse, "stale-rollout": stale_rollout, "actor-not-moving": actor_not_moving,
}
