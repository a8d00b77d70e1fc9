"""Runs: creation, the list query, status transitions (with their events), tokens, deletion."""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import shutil
import unicodedata
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, delete, false, func, text
from sqlmodel import Session, select

from backend.models import (
    TERMINAL,
    Artifact,
    Event,
    HealthAlarm,
    HealthPrompt,
    HealthState,
    LogLine,
    MetricPoint,
    Run,
    RunPublic,
    RunStatus,
    Sample,
    Webhook,
    WebhookDelivery,
)
from backend.models.common import utcnow
from backend.services import run_config
from backend.services.events import RUNS_CHANNEL, add_event, run_channel

SUMMARY_EXCLUDE = {"config", "resolved_config"}


def new_token() -> tuple[str, str]:
    token = secrets.token_urlsafe(32)
    return token, hash_token(token)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, token_hash: str) -> bool:
    return bool(token_hash) and hmac.compare_digest(hash_token(token), token_hash)


def summary(run: Run) -> dict[str, Any]:
    return RunPublic.model_validate(run).model_dump(mode="json", exclude=SUMMARY_EXCLUDE)


def announce(session: Session, run: Run, kind: str = "run") -> None:
    """Tell both feeds about the run's new state (call before commit)."""
    data = summary(run)
    add_event(session, run_channel(run.id), "status" if kind == "run" else kind, data)
    add_event(session, RUNS_CHANNEL, kind, data)


# What the engine's `log_status` may report, in its words.
ENGINE_STATUS = {"running": RunStatus.running, "started": RunStatus.running, "resumed": RunStatus.running,
                 "succeeded": RunStatus.succeeded, "finished": RunStatus.succeeded, "success": RunStatus.succeeded,
                 "failed": RunStatus.failed, "error": RunStatus.failed, "cancelled": RunStatus.cancelled}

VAL_SORT = "val_score"  # the latest held-out score, as the Runs table shows it (not a column: _by_held_out)
SORTS = ("created_at", "started_at", "finished_at", "name", "status", "id", "progress_step", VAL_SORT)


def create_run(*, session: Session, runs_dir: Path, experiment_id: int, name: str, preset: str | None,
               config: dict, resolved_config: dict, tags: list[str], notes: str = "", launch: bool = True,
               parent: Run | None = None, relation: str | None = None) -> tuple[Run, str | None]:
    """Record a run (queued for the dispatcher, or `launch=False`: running, driven from outside, with its
    ingest token returned once) and make its directory."""
    token = None
    run = Run(experiment_id=experiment_id, name=name, preset=preset, config=config, resolved_config=resolved_config,
              tags=tags, notes=notes, source="server" if launch else "external",
              parent_id=parent.id if parent else None, parent_relation=relation)
    if not launch:
        token, run.ingest_token_hash = new_token()
    session.add(run)
    session.flush()
    if not run.name:
        run.name = f"{preset or 'run'}-{run.id}"
    directory = runs_dir / str(run.id)
    directory.mkdir(parents=True, exist_ok=True)
    run.run_dir = str(directory)
    if not launch:
        set_status(session, run, RunStatus.running)
    else:
        announce(session, run)
    session.commit()
    return run, token


def list_runs(*, session: Session, statuses: list[RunStatus] | None = None, experiment_id: int | None = None,
              tags: list[str] | None = None, without_tags: list[str] | None = None, name_contains: str | None = None,
              config: list[tuple[list[str], str]] | None = None, parent_id: int | None = None,
              sort: str = "created_at", descending: bool = True, skip: int = 0, limit: int = 100
              ) -> tuple[list[Run], int]:
    """One page of runs and the number that match. `config` filters are (dotted path, value) pairs. `sort`:
    a column of SORTS, or VAL_SORT (the latest held-out score, as the Runs table shows it)."""
    conditions = []
    if statuses:
        conditions.append(Run.status.in_(statuses))
    if experiment_id is not None:
        conditions.append(Run.experiment_id == experiment_id)
    conditions += tag_conditions(session, tags or [], without_tags or [])
    if name_contains:
        conditions.append(Run.name.icontains(name_contains))  # any case, as SQLite's LIKE (PostgreSQL's is not)
    if parent_id is not None:
        conditions.append(Run.parent_id == parent_id)
    stmt = select(Run).where(*conditions)
    if sort == VAL_SORT:
        return _by_held_out(session, conditions, config, descending, skip, limit)
    column = getattr(Run, sort)
    # NULLs (not started, no progress yet) sort as the smallest value, as SQLite does and PostgreSQL does not
    order = [column.desc().nulls_last() if descending else column.asc().nulls_first(), Run.id.desc()]
    if not config:
        count = session.exec(select(func.count()).select_from(stmt.subquery())).one()
        return list(session.exec(stmt.order_by(*order).offset(skip).limit(limit)).all()), count
    # config values are compared in Python: JSON paths differ between databases
    matching = [r for r in session.exec(stmt.order_by(*order)).all() if _config_matches(r, config)]
    return matching[skip:skip + limit], len(matching)


def _by_held_out(session: Session, conditions: list, config, descending: bool, skip: int, limit: int
                 ) -> tuple[list[Run], int]:
    """Runs ordered by their latest held-out score (metrics.held_out: what the Runs table's Held-out column
    shows), computed for every run that matches; runs without one come last either way, as in the table; equal
    scores newest first."""
    from backend.services.metrics import held_out

    if config:
        ids = [r.id for r in session.exec(select(Run).where(*conditions)).all() if _config_matches(r, config)]
    else:
        ids = list(session.exec(select(Run.id).where(*conditions)).all())
    scores = {run_id: found["val_score"] for run_id, found in held_out(session=session, run_ids=ids).items()
              if found["val_score"] is not None}
    sign = -1 if descending else 1
    ranked = sorted((i for i in ids if i in scores), key=lambda i: (sign * scores[i], -i))
    ranked += sorted((i for i in ids if i not in scores), reverse=True)
    page = ranked[skip:skip + limit]
    rows = {r.id: r for r in session.exec(select(Run).where(Run.id.in_(page))).all()} if page else {}
    return [rows[i] for i in page if i in rows], len(ids)


def fold_tag(tag: str) -> str:
    """A tag as filters compare it: any case (Unicode case folding, so `Straße` = `STRASSE`), composed form."""
    return unicodedata.normalize("NFC", tag).casefold()


def tag_conditions(session: Session, tags: list[str], without_tags: list[str]) -> list:
    """Filters on the runs' tags, the same on SQLite and PostgreSQL: a tag matches any stored tag equal to it but
    for case (fold_tag), non-ASCII included. The stored spellings of each wanted tag are found first (in Python,
    from the distinct tags stored), then a run is kept or dropped by exact membership of one of them (each
    database's JSON array functions), so no database's own case rules or LIKE wildcards come in."""
    if not tags and not without_tags:
        return []
    sqlite = session.get_bind().dialect.name == "sqlite"
    distinct = ("SELECT DISTINCT je.value FROM run, json_each(run.tags) AS je WHERE je.type = 'text'" if sqlite else
                "SELECT DISTINCT e.value FROM run, json_array_elements_text(CAST(run.tags AS JSON)) AS e(value)")
    spelled: dict[str, set[str]] = {}
    for (stored,) in session.execute(text(distinct)):
        spelled.setdefault(fold_tag(stored), set()).add(stored)
    conditions = []
    for n, (wanted, keep) in enumerate([(t, True) for t in tags] + [(t, False) for t in without_tags]):
        spellings = sorted(spelled.get(fold_tag(wanted), ()))
        if not spellings:
            if keep:
                conditions.append(false())  # no run has it
            continue
        name = f"tag_spellings_{n}"
        inner = ("SELECT 1 FROM json_each(run.tags) AS je WHERE je.value IN :{name}" if sqlite else
                 "SELECT 1 FROM json_array_elements_text(CAST(run.tags AS JSON)) AS e(value) WHERE e.value IN :{name}")
        exists = f"{'' if keep else 'NOT '}EXISTS ({inner.format(name=name)})"
        conditions.append(text(exists).bindparams(bindparam(name, spellings, expanding=True)))
    return conditions


def _config_matches(run: Run, filters: list[tuple[list[str], str]]) -> bool:
    for path, wanted in filters:
        node = run.resolved_config
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None and wanted not in ("null", "None"):
            return False
        rendered = run_config.format_value(node).strip("'")
        if rendered != wanted and str(node) != wanted:
            return False
    return True


def update_run(*, session: Session, run: Run, changes: dict[str, Any]) -> Run:
    run.sqlmodel_update(changes)
    session.add(run)
    add_event(session, RUNS_CHANNEL, "run", summary(run))
    session.commit()
    return run


def cancel_run(*, session: Session, run: Run) -> str | None:
    """Mark the run cancelled; returns the Ray job to stop (None: it never reached Ray, or runs outside)."""
    submission_id = run.submission_id if run.source == "server" else None
    set_status(session, run, RunStatus.cancelled, error="Cancelled by user.")
    session.commit()
    return submission_id


def report_status(*, session: Session, run: Run, status: RunStatus, error: str | None = None,
                  step: int | None = None, total: int | None = None) -> bool:
    """The engine's own report (progress and status); returns whether the status changed."""
    if update_progress(run, step, total):
        announce(session, run, kind="progress")
    tail = log_tail(session, run.id) if status == RunStatus.failed else None
    changed = set_status(session, run, status, error=error, log_tail=tail)
    session.add(run)
    session.commit()
    return changed


def set_status(session: Session, run: Run, status: RunStatus, *, error: str | None = None,
               log_tail: str | None = None) -> bool:
    """Move a run to `status`. Terminal states stick (the first one wins); returns whether it changed."""
    if run.status in TERMINAL and status != run.status:
        return False
    if run.status == status and error is None:
        return False
    now = utcnow()
    if status == RunStatus.running and run.started_at is None:
        run.started_at = now
    if status in TERMINAL:
        run.finished_at = now
        run.eta_seconds = None
    run.status = status
    if error is not None:
        run.error = error
    if log_tail is not None:
        run.log_tail = log_tail
    session.add(run)
    announce(session, run)
    if status in TERMINAL:  # once: terminal states stick
        from backend.services.webhooks import on_run_ended

        on_run_ended(session, run)
    return True


FACTS_MAX_BYTES = 20_000
FACTS_MAX_KEYS = 50
NOT_FACTS = {"heartbeat", "step", "error"}


def record_facts(run: Run, fields: dict[str, Any]) -> bool:
    """Keep what the engine reported at its start (`log_status("started", ...)`: device, workers, n_params,
    n_trainable_params, critic_n_params, critic_n_trainable_params, ...) as the run's facts, over any reported before (a restarted job reports again). Values
    too large to show (over FACTS_MAX_BYTES as JSON) and keys past FACTS_MAX_KEYS are left out. Returns whether
    they changed."""
    facts = dict(run.facts or {})
    for key, value in fields.items():
        if key in NOT_FACTS or len(json.dumps(value, default=str)) > FACTS_MAX_BYTES:
            continue
        if len(facts) >= FACTS_MAX_KEYS and str(key)[:100] not in facts:
            break
        facts[str(key)[:100]] = value
    if facts == (run.facts or {}):
        return False
    run.facts = facts
    return True


def update_progress(run: Run, step: int | None, total: int | None) -> bool:
    changed = False
    if step is not None and (run.progress_step is None or step > run.progress_step):
        run.progress_step = step
        changed = True
    if total is not None and total != run.progress_total:
        run.progress_total = total
        changed = True
    if changed and run.started_at is not None and run.progress_step and run.progress_total:
        elapsed = (utcnow() - run.started_at).total_seconds()
        remaining = max(run.progress_total - run.progress_step, 0)
        run.eta_seconds = round(elapsed / run.progress_step * remaining, 1)
    return changed


def log_tail(session: Session, run_id: int, lines: int = 50) -> str:
    rows = session.exec(select(LogLine.text).where(LogLine.run_id == run_id)
                        .order_by(LogLine.id.desc()).limit(lines)).all()
    return "\n".join(reversed(rows))


def delete_run(session: Session, run: Run, runs_dir: Path) -> None:
    """Rows first (explicitly, not trusting FK cascades on every backend), then the run's own directory."""
    run_id = run.id
    for model in (MetricPoint, Sample, LogLine, Artifact, HealthAlarm, HealthState, HealthPrompt, WebhookDelivery,
                  Webhook):
        session.exec(delete(model).where(model.run_id == run_id))
    session.exec(delete(Event).where(Event.channel == run_channel(run_id)))
    for child in session.exec(select(Run).where(Run.parent_id == run_id)).all():
        child.parent_id = None
        session.add(child)
    session.delete(run)
    add_event(session, RUNS_CHANNEL, "deleted", {"id": run_id})
    session.commit()
    directory = Path(run.run_dir) if run.run_dir else None
    if directory is not None and directory.resolve().parent == runs_dir.resolve() and directory.is_dir():
        shutil.rmtree(directory, ignore_errors=True)

