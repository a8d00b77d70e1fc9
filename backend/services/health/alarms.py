"""Writing what was judged (inside the batch's write transaction): the alarm rows that fired, changed or cleared,
the per-prompt signal record, the `health` events, the webhooks' notice, and the auto-stop a run's rule asks for."""
from __future__ import annotations

import time

from sqlmodel import Session

from backend.models import ACTIVE, HealthAlarm, HealthPrompt, Run, RunStatus
from backend.services.events import RUNS_CHANNEL, add_event, run_channel
from backend.services.health import autostop
from backend.services.health.judge import finite
from backend.services.health.report import report, summary
from backend.services.health.state import STOP_JOB, State, save
from backend.services.health.tracker import Change, last, since
from backend.services.runs import set_status
from backend.services.upsert import insert_for
from backend.services.webhooks import on_alarm_changes


def record_prompts(session: Session, run_id: int, finished: list[dict]) -> None:
    """The GRPO groups of a step that ended join the per-prompt record (groups, groups with signal, last step)."""
    if not finished:
        return
    merged: dict[int, list[int]] = {}
    for g in finished:
        m = merged.setdefault(g["prompt_index"], [0, 0, 0])
        m[0] += 1
        m[1] += int(g["signal"])
        m[2] = max(m[2], g["step"])
    stmt = insert_for(session, HealthPrompt)
    stmt = stmt.on_conflict_do_update(index_elements=["run_id", "prompt_index"], set_={
        "groups": HealthPrompt.groups + stmt.excluded.groups,
        "with_signal": HealthPrompt.with_signal + stmt.excluded.with_signal,
        "last_step": stmt.excluded.last_step})
    session.execute(stmt, [{"run_id": run_id, "prompt_index": p, "groups": g, "with_signal": s, "last_step": last}
                           for p, (g, s, last) in sorted(merged.items())])


def write(session: Session, run: Run, row: State, changes: list[Change]) -> None:
    """Save the run's state; write, announce and tell the webhooks of its alarms' changes; auto-stop if due."""
    trackers = row.data.setdefault("alarms", {})
    save(session, row)
    if changes:
        now = time.time()
        for change in changes:
            _write_alarm(session, run.id, change, now)
        session.flush()
        on_alarm_changes(session, run, changes)  # an alarm that fired or cleared: its webhooks are told
        body = report(session, run.id)
        add_event(session, run_channel(run.id), "health", body)
        add_event(session, RUNS_CHANNEL, "health", {"id": run.id, "health": summary(body)})
    _auto_stop(session, run, trackers, frozenset(c.judged.alarm for c in changes if c.kind == "fire"))


def _write_alarm(session: Session, run_id: int, change: Change, now: float) -> None:
    j = change.judged
    alarm = session.get(HealthAlarm, (run_id, j.alarm))
    if change.kind in ("fire", "refine"):
        words = j.describe(change.at)
        if alarm is None:
            alarm = HealthAlarm(run_id=run_id, alarm_id=j.alarm, since_step=change.step, severity=j.severity,
                                state="firing")
        alarm.sqlmodel_update({"severity": j.severity, "state": "firing", "title": words.title, "detail": words.detail,
                               "key": words.key, "since_step": change.step, "cleared_step": None,
                               "values": {k: float(v) for k, v in words.values.items() if finite(v)},
                               "samples": words.samples, "updated_at": now})
    elif alarm is not None:
        alarm.sqlmodel_update({"state": "cleared", "cleared_step": change.step, "updated_at": now})
    else:
        return
    session.add(alarm)


def _auto_stop(session: Session, run: Run, trackers: dict, fired: frozenset[str] = frozenset()) -> None:
    stop_on, after = autostop.rule_of(run.resolved_config)
    if not stop_on or run.status not in ACTIVE:
        return
    due = autostop.due(trackers, stop_on, after, fired)
    if due is None:
        return
    alarm_id, tracker = due
    alarm = session.get(HealthAlarm, (run.id, alarm_id))
    reason = autostop.reason(alarm_id, since(tracker), last(tracker), after, alarm.title if alarm else alarm_id,
                             alarm.detail if alarm else "")
    set_status(session, run, RunStatus.cancelled, error=reason)
    if run.source == "server" and run.submission_id:
        session.info[STOP_JOB] = run.submission_id
