"""Where health meets the database: the hooks the ingest services call inside their write transaction (the run's
state row is read once, the checks see only the new points, a changed alarm is written and announced), the report
(GET /runs/{id}/health, the `health` SSE event), the runs list's summaries, and the stall sweep."""
from __future__ import annotations

import math
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import pairwise
from operator import itemgetter
from typing import Any

from sqlalchemy import event as orm_event
from sqlalchemy import func
from sqlalchemy.orm import Session as OrmSession
from sqlmodel import Session, select

from backend import json_codec
from backend.models import ACTIVE, HealthAlarm, HealthPrompt, Run, RunStatus, Sample
from backend.services.events import RUNS_CHANNEL, add_event, run_channel
from backend.services.health import autostop, sample_checks, stall
from backend.services.health.metric_checks import CHECKS, watched
from backend.services.health.thresholds import THRESHOLDS
from backend.services.health.tracker import AT_REST, Change, Judged, advance, last, since

STEP_KEY = "training/global_step"
STOP_JOB = "rlstudio.health_stop_job"  # session.info: the Ray job an auto-stop asks the route to stop
HEALTH_CHECKS = "rlstudio.health_checks"  # session.info: False when the server judges nothing (RLSTUDIO_HEALTH_CHECKS)
_WATCHED: dict[str, bool] = {}  # key -> whether a check reads it (keys repeat every step: decide once)
RANK = {"error": 2, "warning": 1}
clock = time.time  # the server's clock, for when a step or a heartbeat arrived (tests plant old arrivals through it)


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


@dataclass
class State:
    """A run's health_state row, read and written with plain SQL: ingest's hot path (the ORM's bookkeeping would
    cost more than the checks)."""

    run_id: int
    checked_step: int | None
    data: dict
    stored: bool


# SQLite: each database's states stay in memory between batches (a run's judge lock, held from the read to the
# commit, lets one batch of it be judged at a time; this server is the file's one writer), saved with every batch;
# a new server (a new engine) reads them back from the table. PostgreSQL reads the row, locked, every time.
_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
CACHE_RUNS = 256
TOUCHED = "rlstudio.health_touched"  # session.info: the runs whose cached state this transaction changed


def _state(session: Session, run_id: int) -> State:
    bind = session.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    if sqlite:
        cache = _CACHES.setdefault(bind, OrderedDict())
        session.info.setdefault(TOUCHED, set()).add(run_id)
        found = cache.get(run_id)
        if found is not None:
            cache.move_to_end(run_id)
            return found
    conn, lock = session.connection(), ""
    if not sqlite:  # PostgreSQL: one judge per run at a time, on a row that exists (two first batches race)
        conn.exec_driver_sql(f"INSERT INTO health_state (run_id, checked_step, data) VALUES ({int(run_id)}, NULL, "
                             "CAST('{}' AS JSON)) ON CONFLICT (run_id) DO NOTHING")
        lock = " FOR UPDATE"
    found = conn.exec_driver_sql(
        f"SELECT checked_step, data FROM health_state WHERE run_id = {int(run_id)}{lock}").first()
    state = State(run_id, None, {}, False) if found is None else State(
        run_id, found[0], found[1] if isinstance(found[1], dict) else json_codec.loads(found[1]), True)
    if sqlite:
        cache[run_id] = state
        while len(cache) > CACHE_RUNS:
            cache.popitem(last=False)
    return state


@orm_event.listens_for(OrmSession, "after_rollback")
def _forget(session: OrmSession) -> None:
    """A rolled-back transaction's judgements never happened: its runs' states are read again from the table."""
    touched = session.info.pop(TOUCHED, None)
    if touched:
        cache = _CACHES.get(session.get_bind())
        for run_id in touched:
            (cache or {}).pop(run_id, None)


@orm_event.listens_for(OrmSession, "after_commit")
def _kept(session: OrmSession) -> None:
    session.info.pop(TOUCHED, None)


def _save(session: Session, state: State) -> None:
    sqlite = session.get_bind().dialect.name == "sqlite"
    mark, data = ("?", "?") if sqlite else ("%s", "CAST(%s AS JSON)")  # SQLite's JSON is text
    params = (state.checked_step, json_codec.dumps(state.data), state.run_id)
    conn = session.connection()
    if state.stored:
        conn.exec_driver_sql(f"UPDATE health_state SET checked_step = {mark}, data = {data} WHERE run_id = {mark}",
                             params)
    else:
        conn.exec_driver_sql(f"INSERT INTO health_state (checked_step, data, run_id) VALUES ({mark}, {data}, {mark})",
                             params)
        state.stored = True


def judge_metrics(session: Session, run: Run, rows, series=None) -> Pending | None:
    """Judge the new points of a metrics batch: `rows` ((key, step, value, wall_time); NaN as None), or for a plain
    columnar batch (each key once, finite values) its `series`, read a key at a time. Before the batch's write
    transaction takes the database's write lock (the judging stays out of it); `apply` writes the outcome in it,
    `release` ends it (the run's judge lock is held until then)."""
    if not session.info.get(HEALTH_CHECKS, True):
        return None
    points: dict[str, list] = {}
    walls: dict[str, float] = {}  # per key, the wall time of its newest point (the stall check's clock)
    known = _WATCHED
    if series is not None:
        now = clock()
        for s in series:
            w = known.get(s.key)
            if w is None:
                w = _watched(s.key)
            if w and s.steps:
                pts = list(zip(s.steps, s.values))
                if any(a[0] >= b[0] for a, b in pairwise(pts)):
                    pts.sort()
                points[s.key] = pts
                walls[s.key] = s.wall_times[s.steps.index(pts[-1][0])] if s.wall_times else now
    else:
        timed: dict[str, list] = {}
        for key, step, value, wall in rows:
            w = known.get(key)
            if w is None:
                w = _watched(key)
            if w:
                timed.setdefault(key, []).append((step, math.nan if value is None else value, wall))
        for key, pts in timed.items():
            pts.sort(key=itemgetter(0))
            points[key] = [(s, v) for s, v, _ in pts]
            walls[key] = pts[-1][2]
    if not points:
        return None
    lock, row, data, ctx = _open_state(session, run)
    seen = data.setdefault("seen", {})
    newest = None
    for key in list(points):
        pts, last = points[key], seen.get(key, -1)
        if pts[0][0] <= last:  # a resend of judged steps is history
            pts = points[key] = [p for p in pts if p[0] > last]
            if not pts:
                del points[key]
                continue
        seen[key] = pts[-1][0]
        if newest is None or pts[-1][0] > newest[0]:
            newest = (pts[-1][0], walls[key])
    judged: list[Judged] = []
    for name, check in CHECKS.items():
        judged += check(data.setdefault(name, {}), points, ctx)
    stall.note_phases(data.setdefault("stall", {}), points)
    if newest is not None:
        moving = stall.track(data.setdefault("stall", {}), *newest, received=clock())
        if moving is not None:
            judged.append(moving)
    return Pending(row, _advance_all(row, judged), lock)


def _open_state(session: Session, run: Run):
    """The run's lock (held until `release`), its stored state row, that row's data and the run's context."""
    lock = _run_lock(session, run.id)
    row = _state(session, run.id)
    return lock, row, row.data, row.data.setdefault("ctx", _context(run))


def on_metrics(session: Session, run: Run, rows, series=None) -> None:
    """judge_metrics, apply and release at once (inside a write transaction)."""
    pending = judge_metrics(session, run, rows, series)
    try:
        apply(session, run, pending)
    finally:
        release(pending)


def _answer(s) -> sample_checks.Answer:
    calls, turns = (0, 0) if s.turns is None else sample_checks.tool_use(s.turns)
    return sample_checks.Answer(step=s.step, index=s.sample_index, response=s.response or "", tokens=s.tokens,
                                score=s.score if s.score is not None else s.reward,
                                group=s.group_uid or (None if s.prompt_index is None else f"p{s.prompt_index}"),
                                prompt_index=s.prompt_index, multi_turn=s.turns is not None, tool_calls=calls,
                                turns=turns)


def judge_samples(session: Session, run: Run, samples) -> Pending | None:
    """Judge a batch of answers (SampleIn; the training split only), as judge_metrics does."""
    if not session.info.get(HEALTH_CHECKS, True):
        return None
    answers = [_answer(s) for s in samples if s.split == "train"]
    if not answers:
        return None
    lock, row, data, ctx = _open_state(session, run)
    judged, finished = sample_checks.judge(data.setdefault("answers", {}), answers, ctx)
    return Pending(row, _advance_all(row, judged), lock, finished)


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


def close_ended(session: Session, run: Run) -> None:
    """An ended run's newest step is complete: its GRPO groups join the per-prompt record (a live run's newest step
    joins it when the next step's answers arrive). Called before the record is read; commits when it wrote."""
    if run.status in ACTIVE or not session.info.get(HEALTH_CHECKS, True):
        return
    from backend.services.upsert import write_lock

    lock = _run_lock(session, run.id)
    try:
        with write_lock(session):
            row = _state(session, run.id)
            finished = sample_checks.close_newest(row.data.get("answers") or {})
            if not finished:
                session.rollback()  # nothing to record: the read ends here
                return
            _record_prompts(session, run.id, finished)
            _save(session, row)
            session.commit()
    finally:
        lock.release()


def on_heartbeat(session: Session, run: Run, fields: dict) -> None:
    """The worker's heartbeat (engine/trainer/heartbeat.py: a status report with `fields.heartbeat` = {phase, step,
    time, detail?}): the phase a stalled run is stuck in, since when, and what it waits on."""
    beat = fields.get("heartbeat")
    phase = beat.get("phase") if isinstance(beat, dict) else None
    if not isinstance(phase, str) or not phase:
        return
    began = beat.get("time")
    lock = _run_lock(session, run.id)
    try:
        _beat(session, run, phase, began, beat)
    finally:
        lock.release()


def _beat(session: Session, run: Run, phase: str, began, beat: dict) -> None:
    from backend.services.upsert import write_lock

    with write_lock(session):
        row = _state(session, run.id)
        # when the phase began, on the server's clock: the beat's arrival, less how long the phase had run when the
        # engine sent it (`sent` − `time`, both the engine's clock: their difference holds whatever its offset)
        sent = beat.get("sent")
        age = sent - began if _finite(sent) and _finite(began) else 0.0
        row.data["heartbeat"] = {"phase": phase[:100], "time": clock() - min(max(age, 0.0), 24 * 3600.0),
                                 "step": beat.get("step") if isinstance(beat.get("step"), int) else None}
        if isinstance(beat.get("detail"), str):  # what the phase waits on (the async trainer's wait_rollout)
            row.data["heartbeat"]["detail"] = beat["detail"][:300]
        _save(session, row)


def refresh_stalled(session: Session, run: Run, now: float | None = None) -> str | None:
    """Judge whether the run stalled (no step for stall_factor x its median step time), at `now` (default the
    clock). Commits; returns the Ray job an auto-stop asks to stop."""
    if run.status not in ACTIVE or run.source == "import":  # an import's wall times are its source run's: no clock
        return None
    from backend.services.upsert import write_lock

    lock = _run_lock(session, run.id)
    try:
        with write_lock(session):
            return _refresh(session, run, now)
    finally:
        lock.release()


def _refresh(session: Session, run: Run, now: float | None) -> str | None:
    row = _state(session, run.id)
    judged = stall.judge(row.data.get("stall", {}), clock() if now is None else now, row.data.get("heartbeat"))
    if judged is None:
        session.rollback()  # nothing judged: the read ends here
        return None
    _judge(session, run, row, [judged])
    session.commit()
    return session.info.pop(STOP_JOB, None)


@dataclass
class Pending:
    """A batch judged, not yet written: its run's state, the alarms' changes, the run's judge lock (held until
    `release`), the GRPO groups of a step that ended."""

    row: State
    changes: list[Change]
    lock: threading.Lock
    finished: list[dict] = field(default_factory=list)


def apply(session: Session, run: Run, pending: Pending | None) -> None:
    """Write a judged batch (inside the batch's write transaction)."""
    if pending is not None:
        _record_prompts(session, run.id, pending.finished)
        _apply(session, run, pending.row, pending.changes)


def discard(session: Session, pending: Pending | None) -> None:
    """A judged batch whose write failed (e.g. a number the database refuses) was never stored: its run's cached
    state, which the judging advanced, is read again from the table by the next batch (called before `release`,
    under the run's judge lock). Without this one refused batch would poison every later one of its run."""
    if pending is not None:
        cache = _CACHES.get(session.get_bind())
        if cache is not None:
            cache.pop(pending.row.run_id, None)


def release(pending: Pending | None) -> None:
    if pending is not None and pending.lock.locked():
        pending.lock.release()


_LOCKS: dict[tuple[int, int], threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _run_lock(session: Session, run_id: int) -> threading.Lock:
    """The run's judge lock, taken: one batch of a run judged at a time, from its state's read to its commit."""
    with _LOCKS_LOCK:
        lock = _LOCKS.setdefault((id(session.get_bind()), run_id), threading.Lock())
    lock.acquire()
    return lock


def _advance_all(row: State, judged: list[Judged]) -> list[Change]:
    trackers = row.data.setdefault("alarms", {})
    changes: list[Change] = []
    for j in judged:
        changes += advance(trackers.setdefault(j.alarm, list(AT_REST)), j)
        if j.steps and (row.checked_step is None or j.steps[-1][0] > row.checked_step):
            row.checked_step = j.steps[-1][0]
    return changes


def _judge(session: Session, run: Run, row: State, judged: list[Judged]) -> None:
    _apply(session, run, row, _advance_all(row, judged))


def _apply(session: Session, run: Run, row: State, changes: list[Change]) -> None:
    trackers = row.data.setdefault("alarms", {})
    _save(session, row)
    if changes:
        now = time.time()
        for change in changes:
            _write(session, run.id, change, now)
        session.flush()
        from backend.services.webhooks import on_alarm_changes

        on_alarm_changes(session, run, changes)  # an alarm that fired or cleared: its webhooks are told
        body = report(session, run.id)
        add_event(session, run_channel(run.id), "health", body)
        add_event(session, RUNS_CHANNEL, "health", {"id": run.id, "health": _summary(body)})
    _auto_stop(session, run, trackers, frozenset(c.judged.alarm for c in changes if c.kind == "fire"))


def _write(session: Session, run_id: int, change: Change, now: float) -> None:
    j = change.judged
    alarm = session.get(HealthAlarm, (run_id, j.alarm))
    if change.kind in ("fire", "refine"):
        words = j.describe(change.at)
        if alarm is None:
            alarm = HealthAlarm(run_id=run_id, alarm_id=j.alarm, since_step=change.step, severity=j.severity,
                                state="firing")
        alarm.sqlmodel_update({"severity": j.severity, "state": "firing", "title": words.title, "detail": words.detail,
                               "key": words.key, "since_step": change.step, "cleared_step": None,
                               "values": {k: float(v) for k, v in words.values.items() if _finite(v)},
                               "samples": words.samples, "updated_at": now})
    elif alarm is not None:
        alarm.sqlmodel_update({"state": "cleared", "cleared_step": change.step, "updated_at": now})
    else:
        return
    session.add(alarm)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


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
    from backend.services.runs import set_status

    set_status(session, run, RunStatus.cancelled, error=reason)
    if run.source == "server" and run.submission_id:
        session.info[STOP_JOB] = run.submission_id


# ------------------------------------------------------------------------------------------------ reading
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


def _summary(body: dict) -> dict[str, Any]:
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
    answers at the last step judged (an ended run's last step included: `close_ended` first)."""
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
