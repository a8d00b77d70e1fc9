from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import FileResponse
from sqlalchemy import String, cast, func
from sqlmodel import Session, select

from backend.api.deps import SessionDep, SettingsDep, get_run_or_404
from backend.models import (
    ACTIVE,
    TERMINAL,
    ArtifactsPublic,
    Experiment,
    Run,
    RunCreate,
    RunCreated,
    RunFork,
    RunPublic,
    RunsPublic,
    RunStatus,
    RunUpdate,
)
from backend.services import artifacts, run_config
from backend.services.events import RUNS_CHANNEL, add_event
from backend.services.run_config import RunConfigError
from backend.services import runs as run_service
from backend.services.runs import announce, experiment_by_name, new_token, set_status, summary
from backend.settings import Settings

router = APIRouter(prefix="/runs", tags=["runs"])

SORTS = {"created_at", "started_at", "finished_at", "name", "status", "id", "progress_step"}


def config_error(exc: RunConfigError) -> HTTPException:
    loc = ["body"] + (["preset"] if exc.field == "preset" else ["config"] + (exc.field.split(".") if exc.field else []))
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                         detail=[{"loc": loc, "msg": exc.message, "type": "config_error", "field": exc.field}])


def _experiment_id(session: Session, body_id: int | None, body_name: str | None) -> int:
    if body_id is not None:
        if session.get(Experiment, body_id) is None:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                                detail=[{"loc": ["body", "experiment_id"], "type": "not_found",
                                         "msg": f"experiment_id: experiment {body_id} does not exist."}])
        return body_id
    return experiment_by_name(session, body_name or "default").id


def _new_run(session: Session, settings: Settings, *, experiment_id: int, name: str, preset: str | None,
             tree: dict, resolved: dict, tags: list[str], notes: str, launch: bool,
             parent: Run | None = None, relation: str | None = None) -> tuple[Run, str | None]:
    token = None
    run = Run(experiment_id=experiment_id, name=name, preset=preset, config=tree, resolved_config=resolved,
              tags=tags, notes=notes, source="server" if launch else "external",
              parent_id=parent.id if parent else None, parent_relation=relation)
    if not launch:
        token, run.ingest_token_hash = new_token()
    session.add(run)
    session.flush()
    if not run.name:
        run.name = f"{preset or 'run'}-{run.id}"
    directory = settings.runs_dir / str(run.id)
    directory.mkdir(parents=True, exist_ok=True)
    run.run_dir = str(directory)
    if not launch:
        set_status(session, run, RunStatus.running)
    else:
        announce(session, run)
    session.commit()
    return run, token


def _wake(request: Request) -> None:
    dispatcher = getattr(request.app.state, "dispatcher", None)
    if dispatcher is not None:
        dispatcher.wake()


@router.post("", response_model=RunCreated, status_code=status.HTTP_201_CREATED)
def create_run(request: Request, session: SessionDep, settings: SettingsDep, body: RunCreate):
    """Validate the config with the engine's schema, record the run and queue it for launch on Ray
    (FIFO, at most RLSTUDIO_MAX_CONCURRENT_RUNS at a time). A bad config is a 422 naming the key."""
    try:
        tree, resolved = run_config.validate(body.preset, body.config, body.overrides)
    except RunConfigError as exc:
        raise config_error(exc) from None
    experiment_id = _experiment_id(session, body.experiment_id, body.experiment_name)
    run, token = _new_run(session, settings, experiment_id=experiment_id, name=body.name, preset=body.preset,
                          tree=tree, resolved=resolved, tags=body.tags, notes=body.notes, launch=body.launch)
    _wake(request)
    return RunCreated.model_validate(run, update={"ingest_token": token})


@router.get("", response_model=RunsPublic)
def list_runs(
    session: SessionDep,
    status_: Annotated[list[RunStatus] | None, Query(alias="status")] = None,
    experiment_id: int | None = None,
    tag: Annotated[list[str] | None, Query(description="runs with every one of these tags")] = None,
    q: Annotated[str | None, Query(max_length=200, description="name contains")] = None,
    config: Annotated[list[str] | None, Query(
        description="config value filters `dotted.key=value`, e.g. algorithm.adv_estimator=grpo")] = None,
    parent_id: int | None = None,
    sort: Annotated[str, Query(description="field, '-' prefix for descending: " + ", ".join(sorted(SORTS)))]
    = "-created_at",
    skip: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
):
    field = sort.lstrip("-")
    if field not in SORTS:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            detail=[{"loc": ["query", "sort"], "type": "value_error",
                                     "msg": f"sort: unknown field '{field}'; one of {', '.join(sorted(SORTS))}."}])
    filters = []
    for item in config or []:
        if "=" not in item or not re.match(r"^[A-Za-z_][\w.]*=", item):
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                                detail=[{"loc": ["query", "config"], "type": "value_error",
                                         "msg": f"config: '{item}' is not of the form dotted.key=value."}])
        key, value = item.split("=", 1)
        filters.append((key.split("."), value))
    stmt = select(Run)
    if status_:
        stmt = stmt.where(Run.status.in_(status_))
    if experiment_id is not None:
        stmt = stmt.where(Run.experiment_id == experiment_id)
    for t in tag or []:
        stmt = stmt.where(cast(Run.tags, String).contains(_json_string(t)))
    if q:
        stmt = stmt.where(Run.name.contains(q))
    if parent_id is not None:
        stmt = stmt.where(Run.parent_id == parent_id)
    column = getattr(Run, field)
    order = [column.desc() if sort.startswith("-") else column.asc(), Run.id.desc()]
    if not filters:
        count = session.exec(select(func.count()).select_from(stmt.subquery())).one()
        rows = session.exec(stmt.order_by(*order).offset(skip).limit(limit)).all()
    else:  # config values are compared in Python: JSON paths differ between databases
        matching = [r for r in session.exec(stmt.order_by(*order)).all() if _config_matches(r, filters)]
        count, rows = len(matching), matching[skip:skip + limit]
    return RunsPublic(data=[RunPublic.model_validate(r) for r in rows], count=count)


def _json_string(text: str) -> str:
    import json

    return json.dumps(text)


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


@router.get("/{run_id}", response_model=RunPublic)
def get_run(session: SessionDep, run_id: int):
    return get_run_or_404(session, run_id)


@router.patch("/{run_id}", response_model=RunPublic)
def update_run(session: SessionDep, run_id: int, body: RunUpdate):
    run = get_run_or_404(session, run_id)
    changes = {k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None}
    run.sqlmodel_update(changes)
    session.add(run)
    add_event(session, RUNS_CHANNEL, "run", summary(run))
    session.commit()
    return run


@router.post("/{run_id}/cancel", response_model=RunPublic)
async def cancel_run(request: Request, run_id: int):
    """Stop the run's Ray job (every process gone within seconds) or take it off the queue."""
    engine = request.app.state.engine
    with Session(engine, expire_on_commit=False) as session:
        run = get_run_or_404(session, run_id)
        if run.status in TERMINAL:
            raise HTTPException(status.HTTP_409_CONFLICT, f"Run {run_id} is already {run.status.value}.")
        submission_id = run.submission_id if run.source == "server" else None
        set_status(session, run, RunStatus.cancelled, error="Cancelled by user.")
        session.commit()
    dispatcher = getattr(request.app.state, "dispatcher", None)
    if submission_id and dispatcher is not None:
        await dispatcher.stop_job(submission_id)
    request.app.state.bus.notify()
    return run


@router.post("/{run_id}/fork", response_model=RunCreated, status_code=status.HTTP_201_CREATED)
def fork_run(request: Request, session: SessionDep, settings: SettingsDep, run_id: int, body: RunFork):
    """A new run with the parent's config plus these edits, linked to its parent."""
    parent = get_run_or_404(session, run_id)
    try:
        tree, resolved = run_config.validate(parent.preset, run_config.merge(parent.config, body.config),
                                             body.overrides)
    except RunConfigError as exc:
        raise config_error(exc) from None
    run, token = _new_run(session, settings, experiment_id=parent.experiment_id,
                          name=body.name or f"{parent.name}-fork", preset=parent.preset, tree=tree,
                          resolved=resolved, tags=parent.tags if body.tags is None else body.tags, notes="",
                          launch=body.launch, parent=parent, relation="fork")
    _wake(request)
    return RunCreated.model_validate(run, update={"ingest_token": token})


@router.post("/{run_id}/resume", response_model=RunPublic, status_code=status.HTTP_201_CREATED)
def resume_run(request: Request, session: SessionDep, settings: SettingsDep, run_id: int):
    """A new run that continues the parent from its last checkpoint (trainer.resume_mode=resume_path)."""
    parent = get_run_or_404(session, run_id)
    if parent.status in ACTIVE:
        raise HTTPException(status.HTTP_409_CONFLICT, f"Run {run_id} is still {parent.status.value}.")
    checkpoint = artifacts.latest_checkpoint(parent)
    if checkpoint is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"Run {run_id} has no checkpoint to resume from "
                            "(set trainer.save_freq to save them).")
    edits = {"trainer": {"resume_mode": "resume_path", "resume_from_path": str(checkpoint)}}
    try:
        tree, resolved = run_config.validate(parent.preset, run_config.merge(parent.config, edits), [])
    except RunConfigError as exc:
        raise config_error(exc) from None
    run, _ = _new_run(session, settings, experiment_id=parent.experiment_id, name=f"{parent.name}-resumed",
                      preset=parent.preset, tree=tree, resolved=resolved, tags=parent.tags, notes=parent.notes,
                      launch=True, parent=parent, relation="resume")
    _wake(request)
    return run


@router.delete("/{run_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_run(session: SessionDep, settings: SettingsDep, run_id: int):
    """Deletes the run's data and its directory; refused while it is queued, starting or running."""
    run = get_run_or_404(session, run_id)
    if run.status in ACTIVE:
        raise HTTPException(status.HTTP_409_CONFLICT, f"Run {run_id} is {run.status.value}: cancel it first.")
    run_service.delete_run(session, run, settings.runs_dir)


@router.get("/{run_id}/files", response_model=ArtifactsPublic)
def list_run_files(session: SessionDep, run_id: int):
    """The run's checkpoints, exported model and other files (its directory, scanned now)."""
    run = get_run_or_404(session, run_id)
    rows = artifacts.scan(session, run)
    return ArtifactsPublic(data=rows, count=len(rows))


@router.get("/{run_id}/files/{path:path}", response_class=FileResponse)
def download_run_file(session: SessionDep, run_id: int, path: str):
    """A file inside the run's own directory; anything that resolves outside it is refused."""
    run = get_run_or_404(session, run_id)
    target = artifacts.safe_path(Path(run.run_dir), path)
    if target is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"path: '{path}' is not a file of run {run_id}.")
    return FileResponse(target, filename=target.name)


