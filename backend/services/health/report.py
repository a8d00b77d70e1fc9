"""Health's read side: the report (GET /runs/{id}/health, the `health` SSE event), the runs list's summaries and
the prompts whose GRPO groups never had signal."""
from __future__ import annotations

from typing import Any

from sqlalchemy import func
from sqlmodel import Session, select

from backend.models import HealthAlarm, HealthPrompt, Sample
from backend.services.health.thresholds import THRESHOLDS
from backend.services.questions import question_of

RANK = {"error": 2, "warning": 1}


def report(session: Session, run_id: int) -> dict[str, Any]:
    """The body of GET /runs/{id}/health and of the `health` event."""
    rows = session.exec(select(HealthAlarm).where(HealthAlarm.run_id == run_id)).all()
    checked = session.connection().exec_driver_sql(
        f"SELECT checked_step FROM health_state WHERE run_id = {int(run_id)}").first()
    alarms = sorted(rows, key=lambda a: (a.state != "firing", -RANK.get(a.severity, 0), -a.since_step, a.alarm_id))
    firing = [a for a in alarms if a.state == "firing"]
    status = max((a.severity for a in firing), key=lambda s: RANK.get(s, 0), default="ok")
    return {"run_id": run_id, "status": status, "checked_step": checked[0] if checked else None,
            "alarms": [{"id": a.alarm_id, "severity": a.severity, "state": a.state, "title": a.title,
                        "detail": a.detail, "key": a.key, "since_step": a.since_step, "cleared_step": a.cleared_step,
                        "values": a.values or {}, "samples": a.samples} for a in alarms],
            "thresholds": dict(THRESHOLDS)}


def summary(body: dict) -> dict[str, Any]:
    """A report as the runs list shows it (the runs channel's `health` event)."""
    firing = [a for a in body["alarms"] if a["state"] == "firing"]
    return {"status": body["status"], "firing": [a["id"] for a in firing],
            "alarms": [{k: a[k] for k in ("id", "severity", "title", "since_step")} for a in firing]}


def summaries(session: Session, run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """The runs list's `health` per run: its status and firing alarm ids (one query for the page)."""
    out = {run_id: {"status": "ok", "firing": [], "alarms": []} for run_id in run_ids}
    if not run_ids:
        return out
    rows = session.execute(select(HealthAlarm.run_id, HealthAlarm.alarm_id, HealthAlarm.severity, HealthAlarm.title,
                                  HealthAlarm.since_step)
                           .where(HealthAlarm.run_id.in_(run_ids), HealthAlarm.state == "firing")).all()
    # the report's order: errors first, then the newest
    for run_id, alarm_id, severity, title, since_step in sorted(
            rows, key=lambda r: (r[0], -RANK.get(r[2], 0), -r[4], r[1])):
        entry = out[run_id]
        entry["firing"].append(alarm_id)
        entry["alarms"].append({"id": alarm_id, "severity": severity, "title": title, "since_step": since_step})
        if RANK.get(severity, 0) > RANK.get(entry["status"], 0):
            entry["status"] = severity
    return out


def no_signal_prompts(session: Session, run_id: int, limit: int = 100) -> tuple[list[dict], int]:
    """The prompts whose GRPO groups never had signal (every answer scored alike at every step), with their
    answers at the last step judged (an ended run's last step included: `hooks.close_ended` first)."""
    where = (HealthPrompt.run_id == run_id, HealthPrompt.with_signal == 0)
    count = session.exec(select(func.count()).select_from(HealthPrompt).where(*where)).one()
    prompts = session.exec(select(HealthPrompt).where(*where).order_by(HealthPrompt.groups.desc(),
                                                                       HealthPrompt.prompt_index).limit(limit)).all()
    out = []
    for p in prompts:
        answers = session.execute(select(Sample.prompt, Sample.response, Sample.score, Sample.step)
                                  .where(Sample.run_id == run_id, Sample.prompt_index == p.prompt_index,
                                         Sample.split == "train", Sample.step == p.last_step)
                                  .order_by(Sample.sample_index).limit(16)).all()
        out.append({"prompt_index": p.prompt_index, "groups": p.groups, "last_step": p.last_step,
                    "question": " ".join(question_of(answers[0][0] if answers else "").split())[:500],
                    "answers": [{"response": a[1][:500], "score": a[2]} for a in answers]})
    return out, count
