"""The auto-stop rule a run is launched with: `trainer.health.stop_on` (alarm ids; `skipped` and `nonfinite` also
match their per-role / per-key alarms) and `trainer.health.stop_after_steps` (N). The run is cancelled, with the
alarm as the reason, once a chosen alarm has fired and its condition has held for N steps since its since_step; a
step-one check (invariant_checks.ONCE: judged at one step, it cannot hold N) is due as soon as it fires. Off by
default (an empty stop_on)."""
from __future__ import annotations

from backend.services.health.invariant_checks import ONCE
from backend.services.health.tracker import firing, last, since


def rule_of(resolved_config: dict) -> tuple[list[str], int]:
    health = ((resolved_config or {}).get("trainer") or {}).get("health") or {}
    stop_on = health.get("stop_on") or []
    return [str(a) for a in stop_on], max(1, int(health.get("stop_after_steps") or 1))


def chosen(alarm_id: str, stop_on: list[str]) -> bool:
    return alarm_id in stop_on or alarm_id.split(":", 1)[0] in stop_on


def due(trackers: dict, stop_on: list[str], after: int, fired: frozenset[str] = frozenset()) -> tuple[str, list] | None:
    """The first chosen alarm that has fired for `after` steps, with its tracker state, or None. `fired`: the alarms
    that fired in this batch (a step-one finding may have fired and closed in one batch)."""
    for alarm_id, tracker in sorted(trackers.items()):
        if not chosen(alarm_id, stop_on):
            continue
        if alarm_id in ONCE and (firing(tracker) or alarm_id in fired):
            return alarm_id, tracker
        if firing(tracker) and last(tracker) - since(tracker) + 1 >= after:
            return alarm_id, tracker
    return None


def reason(alarm_id: str, since: int, last: int, after: int, title: str, detail: str) -> str:
    return (f"Stopped by its health rule (trainer.health.stop_on={alarm_id.split(':', 1)[0]}, stop_after_steps="
            f"{after}): alarm {alarm_id} firing since step {since}, at step {last}. {title}: {detail}")
