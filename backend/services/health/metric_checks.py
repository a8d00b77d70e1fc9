"""Checks over metric points. Each is a small function of (its own state, the new points of the keys it reads,
the run's context) -> judgements (`Observation`s), one per new step it can judge; its state holds only what the
next points need (a few window values, a best mean), so the cost is the new points, not the run's length.
`points` maps a key to its new (step, value) pairs in step order (NaN for NaN)."""
from __future__ import annotations

import math
import re
from collections.abc import Callable

from backend.services.health.thresholds import n, t
from backend.services.health.tracker import Observation

Points = dict[str, list[tuple[int, float]]]

KL_KEYS = ("actor/reward_kl_penalty", "actor/kl_loss")  # KL to the reference: in the reward (PPO) or as a loss
SKIP_KEYS = ("actor/grad_norm_nonfinite", "critic/grad_norm_nonfinite")  # 1: the optimizer step was skipped
NONFINITE_KEY = re.compile(r"(loss|grad_norm)(/|$)")
SCORE = "critic/score/mean"
ENTROPY = "actor/entropy"
LENGTH = "response_length/mean"
CLIP = "response_length/clip_ratio"
VALUES_STD = "critic/values/std"
CLIPFRAC = "actor/pg_clipfrac"
MISMATCH_KEYS = ("actor/rollout_log_probs_absdiff", "training/rollout_probs_diff_mean")
TOOL_CALLS = "tool_call_counts/mean"
TURNS = "num_turns/mean"
VAL_SCORE = re.compile(r"^val-core/.+/reward/mean@\d+$")
# the engine's share of GRPO groups whose rewards are all equal, under whatever name it logs it
NO_SIGNAL_KEY = re.compile(r"^(?!val).*(zero[_-]?var|zero[_-]?std|all[_-]?equal|no[_-]?signal)")

FIXED_KEYS = frozenset({*KL_KEYS, *SKIP_KEYS, SCORE, ENTROPY, LENGTH, CLIP, VALUES_STD, CLIPFRAC, *MISMATCH_KEYS,
                        TOOL_CALLS, TURNS})


def watched(key: str) -> bool:
    """Whether any check reads `key` (ingest hands the checks only these)."""
    return (key in FIXED_KEYS or NONFINITE_KEY.search(key) is not None or key.startswith("val-core/")
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


# -------------------------------------------------------------------------------- ported from the UI
def skipped(st: dict, points: Points, ctx: dict) -> list[Observation]:
    out = []
    for key in SKIP_KEYS:
        role = key.split("/")[0]
        s = st.setdefault(role, {"steps": [], "count": 0})
        for step, v in points.get(key, ()):
            bad = finite(v) and v > 0
            if bad:
                s["count"] += 1
                if len(s["steps"]) < 6:
                    s["steps"].append(step)
            listed = ", ".join(map(str, s["steps"])) + (", ..." if s["count"] > len(s["steps"]) else "")
            out.append(Observation(
                f"skipped:{role}", step, bad, "error", key=key, clear_after=n("clear_steps"),
                title=f"{role.capitalize()} update skipped at {s['count']} step{'s' * (s['count'] != 1)}",
                detail=f"{key} = 1 at steps {listed}: the gradient was NaN or Inf, so the optimizer step was skipped "
                       "and the weights did not change (lower the learning rate, check grad clipping and the loss).",
                values={key: v if finite(v) else 0.0, "skipped_steps": s["count"]}, samples={"step": step,
                                                                                            "filter": None}))
    return out


def nonfinite(st: dict, points: Points, ctx: dict) -> list[Observation]:
    skips = {(k.split("/")[0], step) for k in SKIP_KEYS for step, v in points.get(k, ()) if finite(v) and v > 0}
    out = []
    for key, pts in points.items():
        if not NONFINITE_KEY.search(key):
            continue
        for step, v in pts:
            if key.endswith("/grad_norm") and (key.split("/")[0], step) in skips:
                continue  # a non-finite grad norm at a skipped step is the skip itself, reported as such
            bad = not finite(v)
            word = "NaN" if v is None or math.isnan(v) else "Inf"
            out.append(Observation(
                f"nonfinite:{key}", step, bad, "error", key=key, clear_after=n("clear_steps"),
                title=f"{word} in {key}",
                detail=f"{key} is {word} at step {step}: the update diverged (lower the learning rate, check grad "
                       "clipping).", values={"at_step": step}, samples={"step": step, "filter": None}))
    return out


def kl(st: dict, points: Points, ctx: dict) -> list[Observation]:
    key = st.get("key") or next((k for k in KL_KEYS if k in points), None)
    if key is None:
        return []
    st["key"] = key
    out = []
    for step, v in points.get(key, ()):
        out.append(Observation(
            "kl-high", step, finite(v) and v > t("kl_high") or (v is not None and v == math.inf), "warning", key=key,
            fire_after=n("kl_steps"), title=f"KL above {t('kl_high'):g}",
            detail=f"{key} > {t('kl_high'):g} for {n('kl_steps')}+ steps: the policy drifts from the reference "
                   "(raise the KL coefficient or lower the learning rate).", values={key: _num(v)}))
        if step > n("kl_low_grace_steps"):
            out.append(Observation(
                "kl-low", step, finite(v) and v < t("kl_low"), "warning", key=key, fire_after=n("kl_steps"),
                title=f"KL below {t('kl_low'):g}",
                detail=f"{key} < {t('kl_low'):g} for {n('kl_steps')}+ steps: the policy barely moves (learning rate "
                       "too low, or KL too strong).", values={key: _num(v)}))
    return out


def _num(v: float | None) -> float:
    """A number for `values` (JSON): NaN / Inf as +-1e308 would mislead; they are reported as 0 plus the title."""
    return v if finite(v) else 0.0


def _streak_check(alarm: str, key: str, bad: Callable[[float], bool], steps: str, title: str, detail: str):
    def check(st: dict, points: Points, ctx: dict) -> list[Observation]:
        return [Observation(alarm, step, finite(v) and bad(v), "warning", key=key, fire_after=n(steps), title=title,
                            detail=detail, values={key: _num(v)}) for step, v in points.get(key, ())]
    return check


values_flat = _streak_check(
    "values-flat", VALUES_STD, lambda v: v < t("values_std_min"), "values_std_steps", "Critic values have no spread",
    f"{VALUES_STD} < {t('values_std_min'):g} for {n('values_std_steps')}+ steps: the critic predicts a constant "
    "(check critic lr, warmup).")
clip_ratio = _streak_check(
    "clip-ratio", CLIP, lambda v: v > t("clip_ratio_max"), "clip_steps", "Responses hit the length limit",
    f"{CLIP} > {t('clip_ratio_max'):g} for {n('clip_steps')}+ steps: most answers are cut off (raise "
    "max_response_length, or the model is rambling).")


def score_collapse(st: dict, points: Points, ctx: dict) -> list[Observation]:
    """The UI's rule, kept incrementally: the last 2 x window values; each value makes one more window old enough
    to be a candidate best (it ends before the recent window starts)."""
    w = n("score_window")
    ring, out = st.setdefault("ring", []), []
    for step, v in points.get(SCORE, ()):
        push(ring, [step, v if finite(v) else None], 2 * w)
        if len(ring) < 2 * w:
            continue
        candidate = mean(x[1] for x in ring[:w])
        if candidate is not None and (st.get("best") is None or candidate > st["best"]):
            st["best"], st["best_step"] = candidate, ring[0][0]
        recent = mean(x[1] for x in ring[w:])
        best = st.get("best")
        bad = best is not None and best >= t("score_min_best") and recent is not None and \
            recent < best * t("score_drop_ratio")
        out.append(Observation(
            "score-collapse", step, bad, "error", key=SCORE, since=ring[w][0], title="Score collapsed",
            detail=f"{SCORE} fell from {_fmt(best)} (around step {st.get('best_step')}) to {_fmt(recent)}: check the "
                   "samples for degenerate answers; lower the learning rate.",
            values={"best": best or 0.0, "recent": recent or 0.0}, samples={"step": step, "filter": None}))
    return out


# ------------------------------------------------------------------------------------- new checks
def entropy_collapse(st: dict, points: Points, ctx: dict) -> list[Observation]:
    w = n("entropy_window")
    scores = st.setdefault("scores", [])
    for _, v in points.get(SCORE, ()):
        if finite(v):
            if len(st.setdefault("score_start", [])) < w:
                st["score_start"].append(v)
            push(scores, v, w)
    ring, start, out = st.setdefault("ring", []), st.setdefault("start", []), []
    for step, v in points.get(ENTROPY, ()):
        if not finite(v):
            continue
        if len(start) < w:
            start.append(v)
            continue
        push(ring, v, w)
        e0, e = mean(start), mean(ring)
        s0, s = mean(st.get("score_start", [])), mean(scores)
        risen = s0 is not None and s is not None and s - s0 >= t("score_rise_min")
        bad = e0 is not None and e0 > 0 and e < t("entropy_collapse_ratio") * e0 and not risen
        out.append(Observation(
            "entropy-collapse", step, bad, "warning", key=ENTROPY, title="Entropy collapsed",
            detail=f"{ENTROPY} fell to {_fmt(e)} from {_fmt(e0)} at the start (below {t('entropy_collapse_ratio'):g}x) "
                   f"while the score went from {_fmt(s0)} to {_fmt(s)}: the policy stopped exploring without learning "
                   "(raise the entropy coefficient or the temperature, lower the learning rate).",
            values={"entropy": e, "entropy_start": e0, "score": s or 0.0, "score_start": s0 or 0.0},
            samples={"step": step, "filter": None}))
    return out


def held_out(st: dict, points: Points, ctx: dict) -> list[Observation]:
    """At each validation, against the previous one: response length rising while the held-out score does not
    (length hacking), and the training score rising while the held-out score falls (divergence)."""
    w = n("score_window")
    for key, ring in ((SCORE, "scores"), (LENGTH, "lengths")):
        for _, v in points.get(key, ()):
            if finite(v):
                push(st.setdefault(ring, []), v, w)
    key = st.get("key")
    if key is None:
        found = sorted(k for k in points if k.startswith("val-core/"))
        key = next((k for k in found if VAL_SCORE.match(k)), found[0] if found else None)
        if key is None:
            return []
        st["key"] = key
    out = []
    for step, v in points.get(key, ()):
        if not finite(v):
            continue
        now = {"step": step, "val": v, "train": mean(st.get("scores", [])), "length": mean(st.get("lengths", []))}
        prev, st["prev"] = st.get("prev"), now
        if prev is None or step <= prev["step"]:
            continue
        rise = v - prev["val"]
        if prev["length"] and now["length"] is not None:
            bad = now["length"] >= t("length_rise_ratio") * prev["length"] and rise < t("heldout_rise_min")
            out.append(Observation(
                "length-rising", step, bad, "warning", key=LENGTH, title="Answers grow longer, held-out score does not",
                detail=f"{LENGTH} went from {_fmt(prev['length'])} (validation at step {prev['step']}) to "
                       f"{_fmt(now['length'])} while {key} went from {_fmt(prev['val'])} to {_fmt(v)}: length hacking "
                       "(the reward pays for length; check the samples, add a length penalty).",
                values={"length": now["length"], "length_before": prev["length"], "heldout": v,
                        "heldout_before": prev["val"]}, samples={"step": step, "filter": None}))
        if prev["train"] is not None and now["train"] is not None:
            delta = t("divergence_min_delta")
            bad = now["train"] - prev["train"] >= delta and prev["val"] - v >= delta
            out.append(Observation(
                "train-heldout-divergence", step, bad, "warning", key=key, title="Training score up, held-out down",
                detail=f"Between the validations at steps {prev['step']} and {step} the training score rose "
                       f"{_fmt(prev['train'])} -> {_fmt(now['train'])} while {key} fell {_fmt(prev['val'])} -> "
                       f"{_fmt(v)}: over-fitting or reward hacking.",
                values={"train": now["train"], "train_before": prev["train"], "heldout": v,
                        "heldout_before": prev["val"]}))
    return out


def step_one(st: dict, points: Points, ctx: dict) -> list[Observation]:
    """Invariants of the first training step that every correct setup meets: KL to the reference (the initial
    actor) is 0, and the first on-policy mini-batch clips nothing (judged where a step is one mini-batch, one
    epoch: then the step's clip fraction is that mini-batch's)."""
    out = []
    for key in KL_KEYS:
        for step, v in points.get(key, ()):
            if step < 1 or st.get("kl_done"):
                continue
            st["kl_done"] = True
            out.append(Observation(
                "step1-kl", step, not finite(v) or abs(v) > t("step1_kl_max"), "error", key=key,
                title="KL is not 0 at the first step",
                detail=f"{key} = {_fmt(v)} at step {step}, the first update; the reference is the initial actor, so it "
                       f"must be 0 (at most {t('step1_kl_max'):g}): the reference or the actor did not load the same "
                       "weights, or the log-probs are computed differently.", values={key: _num(v)}))
    if ctx.get("one_minibatch"):
        for step, v in points.get(CLIPFRAC, ()):
            if step < 1 or st.get("clip_done"):
                continue
            st["clip_done"] = True
            out.append(Observation(
                "step1-clip", step, not finite(v) or v > t("step1_clipfrac_max"), "error", key=CLIPFRAC,
                title="Clipping on the first on-policy mini-batch",
                detail=f"{CLIPFRAC} = {_fmt(v)} at step {step}: the first mini-batch is on-policy, its importance ratio "
                       "is 1 and nothing may clip; the old log-probs do not match the actor's.", values={CLIPFRAC: _num(v)}))
    return out


def rollout_mismatch(st: dict, points: Points, ctx: dict) -> list[Observation]:
    out = []
    for key in MISMATCH_KEYS:
        for step, v in points.get(key, ()):
            out.append(Observation(
                "rollout-mismatch", step, finite(v) and v > t("rollout_mismatch_max"), "error", key=key,
                title="Rollout and actor disagree",
                detail=f"{key} = {_fmt(v)} > {t('rollout_mismatch_max'):g}: the rollout engine's log-probs differ from "
                       "the actor's (1e-3 is fine; past 1-2% the weight sync is broken).", values={key: _num(v)}))
    return out


def no_signal_metric(st: dict, points: Points, ctx: dict) -> list[Observation]:
    """The engine's own share of zero-variance groups, when it logs one (samples give it otherwise)."""
    key = st.get("key") or next((k for k in sorted(points) if NO_SIGNAL_KEY.search(k)), None)
    if key is None:
        return []
    st["key"] = key
    ctx["no_signal_from_metric"] = True
    ring, out = st.setdefault("ring", []), []
    for step, v in points.get(key, ()):
        if finite(v):
            push(ring, v, n("no_signal_window"))
            out.append(no_signal_observation(step, mean(ring), v, key))
    return out


def no_signal_observation(step: int, trend: float, share: float, key: str | None) -> Observation:
    return Observation(
        "no-signal", step, trend >= t("no_signal_share"), "warning", key=key, title="Groups without learning signal",
        detail=f"{share:.0%} of GRPO groups at step {step} (mean {trend:.0%} over the last {n('no_signal_window')} "
               f"steps) scored every answer alike: their advantages are 0 and they teach nothing (harder or easier "
               "prompts, more answers per prompt, or filter_groups).",
        values={"share": share, "trend": trend}, samples={"step": step, "filter": None})


def tool_collapse(st: dict, points: Points, ctx: dict) -> list[Observation]:
    w = n("tool_window")
    for _, v in points.get(TURNS, ()):
        if finite(v):
            st["turns"] = v
    ring, out = st.setdefault("ring", []), []
    for step, v in points.get(TOOL_CALLS, ()):
        if not finite(v):
            continue
        push(ring, v, w)
        if len(ring) < w:
            continue
        recent = mean(ring)
        if st.get("peak") is None or recent > st["peak"]:
            st["peak"], st["peak_step"] = recent, step
        peak = st["peak"]
        bad = peak >= t("tool_min_peak") and recent <= t("tool_collapse_ratio") * peak
        out.append(Observation(
            "tool-collapse", step, bad, "warning", key=TOOL_CALLS, title="Tool use collapsed",
            detail=f"{TOOL_CALLS} fell to {_fmt(recent)} from {_fmt(peak)} (around step {st.get('peak_step')}); "
                   f"turns per trajectory {_fmt(st.get('turns'))}: the model stopped calling its tools.",
            values={"tool_calls": recent, "tool_calls_peak": peak, **({"turns": st["turns"]} if "turns" in st else {})},
            samples={"step": step, "filter": "uses_tool=false"}))
    return out


# order matters where one check reads what another keeps: none does; every check keeps its own state
CHECKS: dict[str, Callable[[dict, Points, dict], list[Observation]]] = {
    "skipped": skipped, "nonfinite": nonfinite, "kl": kl, "values-flat": values_flat, "clip-ratio": clip_ratio,
    "score-collapse": score_collapse, "entropy-collapse": entropy_collapse, "held-out": held_out,
    "step-one": step_one, "rollout-mismatch": rollout_mismatch, "no-signal-metric": no_signal_metric,
    "tool-collapse": tool_collapse,
}
