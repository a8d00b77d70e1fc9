"""Judgements -> alarm transitions. A check says, for a step, whether it is bad for an alarm (an `Observation`);
`advance` keeps the alarm's consecutive bad / good counts and says when it fires or clears. Pure: the state is a
plain dict stored with the run (backend/services/health/store.py)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Observation:
    alarm: str  # the alarm's id, e.g. "kl-high" or "nonfinite:actor/pg_loss"
    step: int
    bad: bool
    severity: str = "warning"  # warning | error
    title: str = ""
    detail: str = ""
    key: str | None = None  # the metric it reads, when one
    values: dict[str, float] = field(default_factory=dict)  # the numbers behind the judgement
    samples: dict | None = None  # {"step", "filter"}: the answers that show it
    fire_after: int = 1  # consecutive bad steps before it fires
    clear_after: int = 1  # consecutive good steps before it clears
    since: int | None = None  # where the problem started, when the check knows better than "this step"
    refine: bool = False  # judged again at its first step with more data (a step's answers in batches): new numbers


@dataclass
class Change:
    kind: str  # fire | clear
    observation: Observation
    step: int  # fire: since_step; clear: cleared_step


def advance(state: dict, ob: Observation) -> Change | None:
    """Feed one judgement. A step older than the last judged one is ignored (a resend of history); the same step
    judged again (more answers of it arrived) replaces its first judgement."""
    last = state.get("last")
    if last is not None and ob.step < last:
        return None
    if ob.step == last:
        state["bad"], state["good"], state["start"] = state["pb"], state["pg"], state["ps"]
    else:
        state["pb"], state["pg"], state["ps"] = state.get("bad", 0), state.get("good", 0), state.get("start")
    state["last"] = ob.step
    if ob.bad:
        if not state.get("bad"):  # a bad run begins here
            state["start"] = ob.since if ob.since is not None else ob.step
        state["bad"], state["good"] = state.get("bad", 0) + 1, 0
    else:
        state["bad"], state["good"] = 0, state.get("good", 0) + 1
    if not state.get("firing") and ob.bad and state["bad"] >= ob.fire_after:
        state["firing"] = True
        state["since"] = state["start"]
        return Change("fire", ob, state["start"])
    if state.get("firing") and not ob.bad and state["good"] >= ob.clear_after:
        state["firing"] = False
        return Change("clear", ob, ob.step)
    return None
