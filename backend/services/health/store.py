"""Where health meets the database: the hooks the ingest services call inside their write transaction (the run's
state row is read once, the checks see only the new points, a changed alarm is written and announced), the report
(GET /runs/{id}/health, the `health` SSE event), the runs list's summaries, and the stall sweep."""
from __future__ import annotations

import math
import time
from typing import Any

from sqlalchemy import func
from sqlalchemy.orm.attributes import flag_modified
from sqlmodel import Session, select

from backend.models import ACTIVE, HealthAlarm, HealthPrompt, HealthState, Run, RunStatus, Sample
from backend.services.events import RUNS_CHANNEL, add_event, run_channel
from backend.services.health import autostop, sample_checks, stall
from backend.services.health.metric_checks import CHECKS, watched
from backend.services.health.thresholds import THRESHOLDS
from backend.services.health.tracker import Change, Observation, advance

STEP_KEY = "training/global_step"
STOP_JOB = "rlstudio.health_stop_job"  # session.info: the Ray job an auto-stop asks the route to stop
_WATCHED: dict[str, bool] = {}  # key -> whether a check reads it (keys repeat every step: decide once)
RANK = {"error": 2, "warning": 1}


def _watched(key: str) -> bool:
    found = _WATCHED.get(key)
    if found is None:
        found = _WATCHED[key] = key == STEP_KEY or watched(key)
    return found


def _context(run: Run) -> dict[str, Any]:
    """What the checks need from the run's config, read once per run."""
    cfg = run.resolved_config or {}
    data = cfg.get("data") or {}
    arr = cfg.get("actor_rollout_ref") or {}
    actor, rollout = arr.get("actor") or {}, arr.get("rollout") or {}
    cap = rollout.get("response_length") or data.get("max_response_length")
    batch, mini = data.get("train_batch_size"), actor.get("ppo_mini_batch_size")
    one = isinstance(batch, int) and isinstance(mini, int) and batch <= mini and actor.get("ppo_epochs", 1) == 1
    return {"cap": cap if isinstance(cap, int) else None, "one_minibatch": one}


def _state(session: Session, run_id: int) -> HealthState:
    stmt = select(HealthState).where(HealthState.run_id == run_id)
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update()  # two ingest requests of one run judge one after the other
    row = session.exec(stmt).first()
    if row is None:
        row = HealthState(run_id=run_id, data={})
        session.add(row)
    return row


def on_metrics(session: Session, run: Run, rows) -> None:
    """Judge the new points of a metrics batch ((key, step, value, wall_time) rows; NaN as None or nan)."""
    points: dict[str, list] = {}
    for key, step, value, wall in rows:
        if _watched(key):
            points.setdefault(key, []).append((step, math.nan if value is None else value, wall))
    if not points:
        return
    row = _state(session, run.id)
    data = row.data
    ctx = data.setdefault("ctx", _context(run))
    seen = data.setdefault("seen", {})
    fresh: dict[str, list[tuple[int, float]]] = {}
    newest = None
    for key, pts in points.items():
        pts.sort(key=lambda p: p[0])
        last = seen.get(key, -1)
        kept = [p for p in pts if p[0] > last]  # a resend of judged steps is history
        if not kept:
            continue
        seen[key] = kept[-1][0]
        fresh[key] = [(s, v) for s, v, _ in kept]
        if newest is None or kept[-1][0] > newest[0]:
            newest = (kept[-1][0], kept[-1][2])
    observations: list[Observation] = []
    for name, check in CHECKS.items():
        observations += check(data.setdefault(name, {}), fresh, ctx)
    if newest is not None:
        moving = stall.track(data.setdefault("stall", {}), *newest)
        if moving is not None:
            observations.append(moving)
    _judge(session, run, row, observations)


def on_samples(session: Session, run: Run, samples) -> None:
    """Judge a batch of answers (SampleIn); the training split only."""
    answers = [sample_checks.Answer(step=s.step, index=s.sample_index, response=s.response or "", tokens=s.tokens,
                                    score=s.score if s.score is not None else s.reward,
                                    group=s.group_uid or (None if s.prompt_index is None else f"p{s.prompt_index}"),
                                    prompt_index=s.prompt_index, multi_turn=s.turns is not None)
               for s in samples if s.split == "train"]
    if not answers:
        return
    row = _state(session, run.id)
    data = row.data
    ctx = data.setdefault("ctx", _context(run))
    observations, finished = sample_checks.judge(data.setdefault("answers", {}), answers, ctx)
    _record_prompts(session, run.id, finished)
    _judge(session, run, row, observations)


def _record_prompts(session: Session, run_id: int, finished: list[dict]) -> None:
    if not finished:
        return
    from backend.services.upsert import insert_for

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


def on_heartbeat(session: Session, run: Run, fields: dict) -> None:
    """The worker's heartbeat (engine/trainer/heartbeat.py: a status report with `fields.heartbeat` = {phase, step,
    time}): the phase a stalled run is stuck in, and since when."""
    beat = fields.get("heartbeat")
    phase = beat.get("phase") if isinstance(beat, dict) else None
    if not isinstance(phase, str) or not phase:
        return
    began = beat.get("time")
    row = _state(session, run.id)
    row.data["heartbeat"] = {"phase": phase[:100], "step": beat.get("step") if isinstance(beat.get("step"), int) else None,
                             "time": float(began) if _finite(began) else time.time()}
    flag_modified(row, "data")


def refresh_stalled(session: Session, run: Run, now: float | None = None) -> str | None:
    """Judge whether the run stalled (no step for stall_factor x its median step time), at `now` (default the
    clock). Commits; returns the Ray job an auto-stop asks to stop."""
    if run.status not in ACTIVE:
        return None
    row = session.get(HealthState, run.id)
    if row is None or "stall" not in row.data:
        return None
    ob = stall.judge(row.data["stall"], time.time() if now is None else now, row.data.get("heartbeat"))
    if ob is None:
        return None
    _judge(session, run, row, [ob])
    session.commit()
    return session.info.pop(STOP_JOB, None)


def _judge(session: Session, run: Run, row: HealthState, observations: list[Observation]) -> None:
    data = row.data
    trackers = data.setdefault("alarms", {})
    changes: list[Change] = []
    for ob in observations:
        tracker = trackers.setdefault(ob.alarm, {})
        change = advance(tracker, ob)
        if change is None and ob.refine and ob.bad and tracker.get("firing") and ob.step == tracker.get("since"):
            change = Change("fire", ob, ob.step)  # its first step judged again (more of its answers): new numbers
        if change is not None:
            changes.append(change)
        if row.checked_step is None or ob.step > row.checked_step:
            row.checked_step = ob.step
    flag_modified(row, "data")
    session.add(row)
    if changes:
        now = time.time()
        for change in changes:
            _write(session, run.id, change, now)
        session.flush()
        body = report(session, run.id)
        add_event(session, run_channel(run.id), "health", body)
        add_event(session, RUNS_CHANNEL, "health", {"id": run.id, "health": _summary(body)})
    _auto_stop(session, run, trackers)


def _write(session: Session, run_id: int, change: Change, now: float) -> None:
    ob = change.observation
    alarm = session.get(HealthAlarm, (run_id, ob.alarm))
    if change.kind == "fire":
        if alarm is None:
            alarm = HealthAlarm(run_id=run_id, alarm_id=ob.alarm, since_step=change.step, severity=ob.severity,
                                state="firing")
        alarm.sqlmodel_update({"severity": ob.severity, "state": "firing", "title": ob.title, "detail": ob.detail,
                               "key": ob.key, "since_step": change.step, "cleared_step": None,
                               "values": {k: float(v) for k, v in ob.values.items() if _finite(v)},
                               "samples": ob.samples, "updated_at": now})
    elif alarm is not None:
        alarm.sqlmodel_update({"state": "cleared", "cleared_step": change.step, "updated_at": now})
    else:
        return
    session.add(alarm)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _auto_stop(session: Session, run: Run, trackers: dict) -> None:
    stop_on, after = autostop.rule_of(run.resolved_config)
    if not stop_on or run.status not in ACTIVE:
        return
    due = autostop.due(trackers, stop_on, after)
    if due is None:
        return
    alarm_id, tracker = due
    alarm = session.get(HealthAlarm, (run.id, alarm_id))
    reason = autostop.reason(alarm_id, tracker["since"], tracker["last"], after, alarm.title if alarm else alarm_id,
                             alarm.detail if alarm else "")
    from backend.services.runs import set_status

    set_status(session, run, RunStatus.cancelled, error=reason)
    if run.source == "server" and run.submission_id:
        session.info[STOP_JOB] = run.submission_id


# ------------------------------------------------------------------------------------------------ reading
def report(session: Session, run_id: int) -> dict[str, Any]:
    """The body of GET /runs/{id}/health and of the `health` event."""
    rows = session.exec(select(HealthAlarm).where(HealthAlarm.run_id == run_id)).all()
    state = session.get(HealthState, run_id)
    alarms = sorted(rows, key=lambda a: (a.state != "firing", -RANK.get(a.severity, 0), -a.since_step, a.alarm_id))
    firing = [a for a in alarms if a.state == "firing"]
    status = max((a.severity for a in firing), key=lambda s: RANK.get(s, 0), default="ok")
    return {"run_id": run_id, "status": status, "checked_step": state.checked_step if state else None,
            "alarms": [{"id": a.alarm_id, "severity": a.severity, "state": a.state, "title": a.title,
                        "detail": a.detail, "key": a.key, "since_step": a.since_step, "cleared_step": a.cleared_step,
                        "values": a.values or {}, "samples": a.samples} for a in alarms],
            "thresholds": dict(THRESHOLDS)}


def _summary(body: dict) -> dict[str, Any]:
    return {"status": body["status"], "firing": [a["id"] for a in body["alarms"] if a["state"] == "firing"]}


def summaries(session: Session, run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """The runs list's `health` per run: its status and firing alarm ids (one query for the page)."""
    out = {run_id: {"status": "ok", "firing": []} for run_id in run_ids}
    if not run_ids:
        return out
    rows = session.execute(select(HealthAlarm.run_id, HealthAlarm.alarm_id, HealthAlarm.severity)
                           .where(HealthAlarm.run_id.in_(run_ids), HealthAlarm.state == "firing")
                           .order_by(HealthAlarm.run_id, HealthAlarm.alarm_id)).all()
    for run_id, alarm_id, severity in rows:
        entry = out[run_id]
        entry["firing"].append(alarm_id)
        if RANK.get(severity, 0) > RANK.get(entry["status"], 0):
            entry["status"] = severity
    return out


def no_signal_prompts(session: Session, run_id: int, limit: int = 100) -> tuple[list[dict], int]:
    """The prompts whose GRPO groups never had signal (every answer scored alike at every step), with their
    answers at the last step judged."""
    where = (HealthPrompt.run_id == run_id, HealthPrompt.with_signal == 0)
    count = session.exec(select(func.count()).select_from(HealthPrompt).where(*where)).one()
    prompts = session.exec(select(HealthPrompt).where(*where).order_by(HealthPrompt.groups.desc(),
                                                                       HealthPrompt.prompt_index).limit(limit)).all()
    from backend.services.samples import question_of

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
