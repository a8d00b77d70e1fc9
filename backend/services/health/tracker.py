"""Judgements -> alarm transitions. A check judges an alarm at each new step it can (a `Judged`: the steps in order,
each bad or good, and how to describe the alarm at a step); `advance` keeps the alarm's consecutive bad / good counts
and says where it fires or clears. Pure: the state is a plain dict stored with the run (state.py). A step costs a
tuple and a few integer operations; the words of an alarm are built only when it changes."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter


@dataclass(slots=True)
class Described:
    """What an alarm says at a step: shown while it fires."""

    title: str
    detail: str
    key: str | None = None  # the metric it reads, when one
    values: dict[str, float] = field(default_factory=dict)  # the numbers behind the judgement
    samples: dict | None = None  # {"step", "filter"}: the answers that show it


@dataclass(slots=True)
class Judged:
    alarm: str  # the alarm's id, e.g. "kl-high" or "nonfinite:actor/pg_loss"
    severity: str  # warning | error
    steps: list[tuple[int, bool]]  # (step, bad), in step order
    describe: Callable[[int], Described]  # the alarm's words and numbers at a step
    fire_after: int = 1  # consecutive bad steps before it fires
    clear_after: int = 1  # consecutive good steps before it clears
    since: Callable[[int], int] | None = None  # where a bad run starting at a step began, when the check knows better
    refine: bool = False  # a step judged again with more of its data (a step's answers in batches) updates the words


@dataclass(slots=True)
class Change:
    kind: str  # fire | clear | refine (its first step judged again: new numbers)
    judged: Judged
    at: int  # the step judged when it changed (its words are described there)
    step: int  # fire / refine: since_step; clear: cleared_step


FIELDS = ("last", "bad", "good", "start", "firing", "since", "pb", "pg", "ps")  # a tracker's state, stored as a list
AT_REST = [None, 0, 0, None, False, None, 0, 0, None]


def firing(tracker: list) -> bool:
    return bool(tracker[4])


def since(tracker: list) -> int | None:
    return tracker[5]


def last(tracker: list) -> int | None:
    return tracker[0]


def advance(state: list, judged: Judged) -> list[Change]:
    """Feed an alarm's judgements; `state` (a list, FIELDS) is updated in place. A step older than the last judged
    one is ignored (a resend of history); the same step judged again (more answers of it arrived) replaces its first
    judgement."""
    steps = judged.steps
    if not steps:
        return []
    last, bad, good, start, on, since, pb, pg, ps = state
    if not on and not bad and (last is None or steps[0][0] > last) and not any(map(itemgetter(1), steps)):
        # the common case: a healthy alarm stays healthy; only the counts move
        state[:] = [steps[-1][0], 0, good + len(steps), start, False, since, 0, good + len(steps) - 1, start]
        return []
    fire_after, clear_after = judged.fire_after, judged.clear_after
    changes: list[Change] = []
    for step, is_bad in steps:
        if last is not None and step < last:
            continue
        if step == last:
            bad, good, start = pb, pg, ps
        else:
            pb, pg, ps = bad, good, start
        last = step
        if is_bad:
            if not bad:  # a bad run begins here
                start = judged.since(step) if judged.since else step
            bad, good = bad + 1, 0
            if not on and bad >= fire_after:
                on, since = True, start
                changes.append(Change("fire", judged, step, start))
            elif on and judged.refine and step == since:
                changes.append(Change("refine", judged, step, since))
        else:
            bad, good = 0, good + 1
            if on and good >= clear_after:
                on = False
                changes.append(Change("clear", judged, step, step))
    state[:] = [last, bad, good, start, on, since, pb, pg, ps]
    return changes
