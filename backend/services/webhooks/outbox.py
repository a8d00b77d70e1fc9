"""The events, written as delivery rows inside the transaction that stores their cause (a run's terminal status, an
alarm that fires or clears): sent exactly when that change is committed, never for a change rolled back, and still
sent after a restart. A run's own webhooks and its experiment's are told, those that asked for the event."""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import or_
from sqlmodel import Session, select

from backend.models import Experiment, HealthAlarm, Run, RunStatus, Webhook, WebhookDelivery
from backend.services.webhooks.masking import mask_url
from backend.services.webhooks.messages import text_of

ENDED = {RunStatus.succeeded: "run.succeeded", RunStatus.failed: "run.failed", RunStatus.lost: "run.failed",
         RunStatus.cancelled: "run.cancelled"}
STALLED = "stalled"  # the health alarm whose firing is `run.stalled`


def _run_facts(session: Session, run: Run) -> dict[str, Any]:
    experiment = session.get(Experiment, run.experiment_id)
    return {"id": run.id, "name": run.name, "status": getattr(run.status, "value", run.status),
            "experiment_id": run.experiment_id, "experiment": experiment.name if experiment else None,
            "step": run.progress_step, "error": (run.error or "")[:2000] or None}


def _subscribed(session: Session, run: Run) -> list[Webhook]:
    return list(session.exec(select(Webhook).where(
        Webhook.enabled.is_(True),
        or_(Webhook.run_id == run.id, Webhook.experiment_id == run.experiment_id))).all())


def _enqueue(session: Session, run: Run, hooks: list[Webhook], event: str, payload: dict[str, Any]) -> None:
    now = time.time()
    for hook in hooks:
        if event in (hook.events or ()):
            session.add(WebhookDelivery(webhook_id=hook.id, run_id=run.id, event=event, payload=payload,
                                        url_masked=mask_url(hook.url), state="pending", next_attempt_at=now))


def _stamp() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def on_run_ended(session: Session, run: Run) -> None:
    """The run reached a terminal status (services/runs.set_status, once: terminal states stick)."""
    event = ENDED.get(run.status)
    hooks = _subscribed(session, run) if event else []
    if not hooks:
        return
    facts = _run_facts(session, run)
    _enqueue(session, run, hooks, event, {"event": event, "time": _stamp(), "text": text_of(event, facts),
                                          "run": facts})


def on_alarm_changes(session: Session, run: Run, changes) -> None:
    """Alarms that fired or cleared in this batch (services/health/store.py; a `refine` of a firing alarm's numbers
    is not news). The alarm rows are written (flushed) already."""
    news = [c for c in changes if c.kind in ("fire", "clear")]
    hooks = _subscribed(session, run) if news else []
    if not hooks:
        return
    facts = _run_facts(session, run)
    for change in news:
        row = session.get(HealthAlarm, (run.id, change.judged.alarm))
        if row is None:
            continue
        alarm = {"id": row.alarm_id, "severity": row.severity, "state": row.state, "title": row.title,
                 "detail": row.detail, "key": row.key, "since_step": row.since_step, "cleared_step": row.cleared_step}
        if change.kind == "clear":
            event = "alarm.cleared"
        else:
            event = "run.stalled" if row.alarm_id == STALLED else "alarm.fired"
        _enqueue(session, run, hooks, event, {"event": event, "time": _stamp(),
                                              "text": text_of(event, facts, alarm), "run": facts, "alarm": alarm})
