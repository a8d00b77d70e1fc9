"""Checks over the stored answers (training split), kept as running tallies of the newest step so each batch of
answers costs only itself: degenerate answers (ported from the UI), garbage answers, the score-length correlation
(length hacking), the share of GRPO groups without learning signal with the prompts that never had one, and tool
use in multi-turn answers (its collapse, judged from the answers when the run logs no `tool_call_counts/mean`)."""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from operator import eq

from backend.services.health.metric_checks import mean, no_signal, push
from backend.services.health.thresholds import n, t
from backend.services.health.tracker import Described, Judged


@dataclass
class Answer:
    step: int
    index: int
    response: str
    tokens: list[str] | None
    score: float | None
    group: str | None  # group_uid, else the prompt index: the answers one advantage baseline compares
    prompt_index: int | None
    multi_turn: bool
    tool_calls: int = 0  # multi-turn: the calls the model made (or the tool answers it got, if more)
    turns: int = 0  # multi-turn: the conversation's turns, the prompt included (the engine's num_turns)


def tool_use(turns) -> tuple[int, int]:
    """(tool calls, turns) of a stored conversation (backend/models/trajectory.py: calls on the model turns)."""
    calls = answers = 0
    for turn in turns:
        if turn.role == "tool":
            answers += 1
        else:
            calls += len(turn.tool_calls or ())
    return max(calls, answers), 1 + len(turns)


def degenerate_reason(response: str, tokens: list[str] | None) -> str | None:
    """Why an answer is degenerate, or None: empty, or repetitive (frontend/src/lib/alarms.ts' rule)."""
    if response.strip() == "":
        return "empty"
    words = tokens if tokens else response.split()
    run = n("repeat_run")
    # a token repeated `run` times in a row = `run - 1` neighbours equal in a row (compared in C, not a Python loop)
    if len(words) >= run and b"\x01" * (run - 1) in bytes(map(eq, words, words[1:])):
        return "repetitive"
    k = n("repeat_ngram")
    if len(words) >= n("repeat_min_tokens"):
        top = max(Counter(zip(*(words[i:] for i in range(k)))).values(), default=0)
        if top * k / len(words) > t("repeat_coverage"):
            return "repetitive"
    return None


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # control bytes but \t \n \r


def garbage_reason(answer: Answer, cap: int | None) -> str | None:
    """Replacement characters (bytes that did not decode), control bytes, or one token repeated up to the length cap
    (the answer ran out of room mid-loop)."""
    text = answer.response
    if "\ufffd" in text:
        return "replacement characters"
    if _CONTROL.search(text):
        return "control bytes"
    tokens = answer.tokens
    if cap and tokens and not answer.multi_turn and len(tokens) >= cap:
        tail = tokens[-n("repeat_run"):]
        if len(tail) == n("repeat_run") and len(set(tail)) == 1:
            return "token repeated to the length cap"
    return None


def _new_tally(step: int) -> dict:
    return {"step": step, "seen": [], "n": 0, "kinds": {}, "garbage": {}, "xy": [0, 0.0, 0.0, 0.0, 0.0, 0.0],
            "groups": {}, "tools": [0, 0, 0]}


def judge(st: dict, answers: list[Answer], ctx: dict) -> tuple[list[Judged], list[dict]]:
    """Feed a batch of training answers; returns the judgements and the finished groups of a step that ended
    ({prompt_index, signal}) for the per-prompt record."""
    out: list[Judged] = []
    finished: list[dict] = []
    by_step: dict[int, list[Answer]] = {}
    for a in answers:
        by_step.setdefault(a.step, []).append(a)
    for step in sorted(by_step):
        tally = st.get("tally")
        if tally is not None and step < tally["step"]:
            continue  # an older step resent: its verdicts are history
        if tally is None or step > tally["step"]:
            if tally is not None and not tally.get("recorded"):
                finished += _close(st, tally)
            tally = st["tally"] = _new_tally(step)
        seen = set(tally["seen"])
        for a in by_step[step]:
            if a.index in seen:
                continue  # a resend of an answer already counted
            seen.add(a.index)
            _count(tally, a, ctx)
        tally["seen"] = sorted(seen)
        out += _observe(st, tally, ctx)
    return out, finished


def _count(tally: dict, a: Answer, ctx: dict) -> None:
    tally["n"] += 1
    reason = degenerate_reason(a.response, a.tokens)
    if reason:
        tally["kinds"][reason] = tally["kinds"].get(reason, 0) + 1
    if a.multi_turn:
        tools = tally.setdefault("tools", [0, 0, 0])  # multi-turn answers, their tool calls, their turns
        tools[0] += 1
        tools[1] += a.tool_calls
        tools[2] += a.turns
    junk = garbage_reason(a, ctx.get("cap"))
    if junk:
        tally["garbage"][junk] = tally["garbage"].get(junk, 0) + 1
    if a.score is not None and math.isfinite(a.score):
        length = len(a.tokens) if a.tokens else len(a.response)
        xy = tally["xy"]  # running sums for Pearson's r: n, x, y, xx, yy, xy
        xy[0] += 1
        xy[1] += length
        xy[2] += a.score
        xy[3] += length * length
        xy[4] += a.score * a.score
        xy[5] += length * a.score
        if a.group is not None:
            g = tally["groups"].setdefault(a.group, [a.score, False, 0, a.prompt_index])
            g[1] = g[1] or a.score != g[0]
            g[2] += 1


def _pearson(xy: list[float]) -> float | None:
    k, sx, sy, sxx, syy, sxy = xy
    if k < 2:
        return None
    vx, vy = sxx - sx * sx / k, syy - sy * sy / k
    if vx <= 1e-12 or vy <= 1e-12:
        return None
    return (sxy - sx * sy / k) / math.sqrt(vx * vy)


def _no_signal_share(tally: dict) -> float | None:
    groups = [g for g in tally["groups"].values() if g[2] >= 2]
    return sum(not g[1] for g in groups) / len(groups) if groups else None


def close_newest(st: dict) -> list[dict]:
    """The run ended: its newest step is complete, so it closes now, not when a next step's answers arrive (there is
    none). Once: an answer of that step sent after this is still judged, not recorded again."""
    tally = st.get("tally")
    if not tally or tally.get("recorded"):
        return []
    tally["recorded"] = True
    return _close(st, tally)


def _close(st: dict, tally: dict) -> list[dict]:
    """A step ended (a newer one began): its correlation and no-signal share join the trends."""
    r = _pearson(tally["xy"])
    if r is not None and tally["xy"][0] >= n("length_corr_min_samples"):
        push(st.setdefault("corr", []), r, n("length_corr_window"))
    share = _no_signal_share(tally)
    if share is not None:
        push(st.setdefault("no_signal", []), share, n("no_signal_window"))
    tools = tally.get("tools")
    if tools and tools[0]:
        ring = st.setdefault("tool_ring", [])
        push(ring, tools[1] / tools[0], n("tool_window"))
        if len(ring) == n("tool_window"):
            window = sum(ring) / len(ring)
            if st.get("tool_peak") is None or window > st["tool_peak"]:
                st["tool_peak"], st["tool_peak_step"] = window, tally["step"]
    return [{"prompt_index": g[3], "signal": g[1], "step": tally["step"]} for g in tally["groups"].values()
            if g[2] >= 2 and g[3] is not None]


def _observe(st: dict, tally: dict, ctx: dict) -> list[Judged]:
    """The newest step's judgements from its tally so far (`refine`: more of its answers update the numbers)."""
    step, total, out = tally["step"], tally["n"], []
    bad = sum(tally["kinds"].values())
    kinds = ", ".join(f"{v} {k}" for k, v in sorted(tally["kinds"].items())) or "none"
    out.append(Judged("degenerate", "warning", [(step, total > 0 and bad / total >= t("degenerate_share"))],
                      lambda s: Described("Degenerate answers", f"{bad} of {total} answers at step {s} are degenerate "
                                          f"({kinds}).", None, {"degenerate": float(bad), "answers": float(total),
                                                                "share": bad / total if total else 0.0},
                                          {"step": s, "filter": None}), refine=True))
    junk = sum(tally["garbage"].values())
    junk_kinds = ", ".join(f"{v} {k}" for k, v in sorted(tally["garbage"].items())) or "none"
    out.append(Judged("garbage", "error", [(step, total > 0 and junk / total >= t("garbage_share"))],
                      lambda s: Described("Garbage answers", f"{junk} of {total} answers at step {s} are garbage "
                                          f"({junk_kinds}): broken decoding, a tokenizer mismatch or weights gone bad.",
                                          None, {"garbage": float(junk), "answers": float(total),
                                                 "share": junk / total if total else 0.0},
                                          {"step": s, "filter": None}), refine=True))
    r = _pearson(tally["xy"])
    if r is not None and tally["xy"][0] >= n("length_corr_min_samples"):
        window = [*st.get("corr", [])[-(n("length_corr_window") - 1):], r]
        trend = mean(window)
        out.append(Judged(
            "length-hacking", "warning",
            [(step, len(window) >= n("length_corr_window") and trend > t("length_corr_max"))],
            lambda s: Described("Reward follows answer length",
                                f"Within a step, score and answer length correlate at r = {r:.2f} (mean {trend:.2f} "
                                f"over the last {len(window)} steps): longer answers are paid more; check the reward "
                                "for length hacking.", None, {"correlation": r, "trend": trend},
                                {"step": s, "filter": "order=-score"}), refine=True))
    tools = tally.get("tools")
    if tools and tools[0] and not ctx.get("tool_calls_from_metric"):
        out += _tool_collapse(st, tally, tools)
    share = _no_signal_share(tally)
    if share is not None and not ctx.get("no_signal_from_metric"):
        window = [*st.get("no_signal", [])[-(n("no_signal_window") - 1):], share]
        trend = mean(window)
        judged = no_signal([(step, trend >= t("no_signal_share"))], lambda s: (trend, share), None)
        judged.refine = True
        out.append(judged)
    return out


def _tool_collapse(st: dict, tally: dict, tools: list) -> list[Judged]:
    """metric_checks.tool_collapse's rule on the answers: the mean tool calls per multi-turn answer over the last
    tool_window steps (the closed ones and the newest so far) against the best such window."""
    w, step = n("tool_window"), tally["step"]
    calls, turns = tools[1] / tools[0], tools[2] / tools[0]
    window = [*st.get("tool_ring", [])[-(w - 1):], calls]
    if len(window) < w:
        return []
    recent = sum(window) / w
    peak, peak_step = st.get("tool_peak"), st.get("tool_peak_step")
    if peak is None or recent > peak:
        peak, peak_step = recent, step
    bad = peak >= t("tool_min_peak") and recent <= t("tool_collapse_ratio") * peak

    def describe(s: int) -> Described:
        return Described(
            "Tool use collapsed", f"The answers' tool calls fell to {recent:.3g} per trajectory (mean of the last {w} "
            f"steps) from {peak:.3g} (around step {peak_step}); turns per trajectory {turns:.3g} at step {s}: the "
            "model stopped calling its tools (judged from the stored answers: the run logs no tool_call_counts/mean).",
            None, {"tool_calls": recent, "tool_calls_peak": peak, "turns": turns},
            {"step": s, "filter": "uses_tool=false"})
    return [Judged("tool-collapse", "warning", [(step, bad)], describe, refine=True)]
