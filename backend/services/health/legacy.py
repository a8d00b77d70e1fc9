"""Health state written by an older server, brought to today's rules once, when a server starts.

Before the step-one checks became setup findings (issue 28, invariant_checks.py) each fired at the run's first step
and was then never judged again: its state says so (`kl_done` / `clip_done` in the run's `step-one` state) and its
alarm stays firing for good, on the run page and as a Runs badge, however well the run trained after. Such a run is
judged now as today's rules would have judged it, from its stored metrics: `step1-kl` clears at the first later
step that logged KL, `step1-clip` at the first later step whose clip fraction is in band. A running run with no
such step yet is left open, so the live checks close it at that step; an ended one keeps the finding (as a run that
ends at step 1 does today). Idempotent: a repaired state has no `*_done` key left."""
from __future__ import annotations

import logging
import time

from sqlalchemy import func, text
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from backend import json_codec
from backend.models import ACTIVE, HealthAlarm, MetricPoint, Run
from backend.services.health.invariant_checks import CLIPFRAC, KL_KEYS
from backend.services.health.thresholds import t
from backend.services.health.tracker import AT_REST

log = logging.getLogger("rlstudio.health")
CHECK = "step-one"  # the checks' state key (metric_checks.CHECKS)
OLD = {"kl_done": ("kl", "step1-kl"), "clip_done": ("clip", "step1-clip")}


def close_stale_step_one(engine: Engine) -> int:
    """Repair every run whose step-one state an older server wrote; returns how many alarms it cleared."""
    sqlite = engine.dialect.name == "sqlite"
    data_text = "data" if sqlite else "CAST(data AS TEXT)"
    cleared = 0
    with Session(engine) as session:
        rows = session.execute(text(f"SELECT run_id, data FROM health_state WHERE {data_text} LIKE '%\\_done%' "
                                    "ESCAPE '\\'")).all()
        for run_id, raw in rows:
            data = raw if isinstance(raw, dict) else json_codec.loads(raw)
            st = data.get(CHECK)
            if not isinstance(st, dict) or not any(old in st for old in OLD):
                continue
            run = session.get(Run, run_id)
            for old, (kind, alarm_id) in OLD.items():
                if st.pop(old, None) is None:
                    continue
                cleared += _repair(session, run, data, st, kind, alarm_id)
            mark = "?" if sqlite else "%s"
            value = "?" if sqlite else "CAST(%s AS JSON)"
            session.connection().exec_driver_sql(f"UPDATE health_state SET data = {value} WHERE run_id = {mark}",
                                                 (json_codec.dumps(data), run_id))
        session.commit()
    if cleared:
        log.warning("cleared %d step-one alarm(s) that an older server left firing for good", cleared)
    return cleared


def _repair(session: Session, run: Run | None, data: dict, st: dict, kind: str, alarm_id: str) -> int:
    alarm = session.get(HealthAlarm, (run.id, alarm_id)) if run is not None else None
    if alarm is None or alarm.state != "firing":
        st[kind] = "done"
        return 0
    at = _closing_step(session, run.id, kind, alarm.since_step)
    if at is None:
        if run.status in ACTIVE:  # the live check closes it at its next step
            st[kind] = "open"
            if kind == "kl":
                st["kl_found"] = dict(alarm.values or {}) or {alarm.key or KL_KEYS[0]: 0.0}
        else:
            st[kind] = "done"
        return 0
    st[kind] = "done"
    alarm.sqlmodel_update({"state": "cleared", "cleared_step": at, "updated_at": time.time()})
    session.add(alarm)
    tracker = list(AT_REST)
    tracker[0], tracker[2], tracker[3], tracker[5] = at, 1, alarm.since_step, alarm.since_step
    data.setdefault("alarms", {})[alarm_id] = tracker
    return 1


def _closing_step(session: Session, run_id: int, kind: str, since: int) -> int | None:
    """The first step after `since` at which today's rule clears the finding, from the stored metrics."""
    where = [MetricPoint.run_id == run_id, MetricPoint.step > since]
    if kind == "kl":
        where.append(MetricPoint.key.in_(KL_KEYS))
    else:
        where += [MetricPoint.key == CLIPFRAC, MetricPoint.value.is_not(None),
                  MetricPoint.value <= t("step1_clipfrac_max")]
    return session.exec(select(func.min(MetricPoint.step)).where(*where)).one()
