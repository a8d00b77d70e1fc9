"""Runs: create (validated by the engine's schema), list, read, edit, cancel, fork, resume, delete, files; and
the engine's own status reports (ingest: the run's token or the API token)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import FileResponse
from pydantic import StringConstraints

from backend.api.deps import IngestRunDep, SessionDep, SettingsDep, get_run_or_404
from backend.api.errors import config_error, unprocessable, validated_config
from backend.models import (
    ACTIVE,
    TERMINAL,
    ArtifactsPublic,
    Experiment,
    IngestResult,
    RunCreate,
    RunCreated,
    RunFork,
    RunPublic,
    RunQueue,
    RunsPublic,
    RunStatus,
    RunStatusReport,
    RunSummary,
    RunUpdate,
)
from backend.services import artifacts, experiments, health, run_config
from backend.services import metrics as metrics_service
from backend.services import runs as runs_service
from backend.services.dispatch import queue as dispatch_queue
from backend.services.run_config import RunConfigError
from backend.settings import Settings

router = APIRouter(prefix="/runs", tags=["runs"])
ingest_router = APIRouter(prefix="/runs", tags=["runs"])  # authenticated by the run's ingest token or the API token

CONFIG_FILTER = re.compile(r"^[A-Za-z_][\w.]*=")
SORT_VALUES = [f"{sign}{field}" for field in runs_service.SORTS for sign in ("", "-")]


def _files_in(settings: Settings, launch: bool) -> Path | None:
    """Where the job will read its data files, when that is this machine (its own Ray head runs the job)."""
    if not launch or settings.ray_address:
        return None
    return (settings.job_workdir or Path.cwd()).resolve()


def _wake_dispatcher(request: Request) -> None:
    dispatcher = getattr(request.app.state, "dispatcher", None)
    if dispatcher is not None:
        dispatcher.wake()


@router.post("", response_model=RunCreated, status_code=status.HTTP_201_CREATED)
def create_run(request: Request, session: SessionDep, settings: SettingsDep, body: RunCreate):
    """Validate the config with the engine's schema, record the run and queue it for launch on Ray
    (FIFO, at most RLSTUDIO_MAX_CONCURRENT_RUNS at a time). A bad config is a 422 naming the key."""
    tree, resolved = validated_config(body.preset, body.config, body.overrides,
                                      files_in=_files_in(settings, body.launch))
    if body.experiment_id is not None:
        if session.get(Experiment, body.experiment_id) is None:
            raise unprocessable(["body", "experiment_id"],
                                f"experiment_id: experiment {body.experiment_id} does not exist.", "not_found")
        experiment_id = body.experiment_id
    else:
        experiment_id = experiments.get_or_create(session=session, name=body.experiment_name or "default").id
    run, token = runs_service.create_run(
        session=session, runs_dir=settings.runs_dir, experiment_id=experiment_id, name=body.name,
        preset=body.preset, config=tree, resolved_config=resolved, tags=body.tags, notes=body.notes,
        launch=body.launch)
    _wake_dispatcher(request)
    return RunCreated.model_validate(run, update={"ingest_token": token})


@router.get("", response_model=RunsPublic)
def list_runs(
    session: SessionDep,
    status_: Annotated[list[RunStatus] | None, Query(alias="status")] = None,
    experiment_id: int | None = None,
    tag: Annotated[list[str] | None, Query(description="runs with every one of these tags")] = None,
    not_tag: Annotated[list[str] | None, Query(description="runs with none of these tags (the UI hides 'archived')")]
    = None,
    q: Annotated[str | None, Query(max_length=200, description="name contains")] = None,
    config: Annotated[list[Annotated[str, StringConstraints(pattern=CONFIG_FILTER.pattern)]] | None, Query(
        description="config value filters `dotted.key=value`, e.g. algorithm.adv_estimator=grpo")] = None,
    parent_id: int | None = None,
    sort: Annotated[str, Query(description="field, '-' prefix for descending: "
                                           + ", ".join(sorted(runs_service.SORTS)),
                               json_schema_extra={"enum": SORT_VALUES})] = "-created_at",
    skip: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
):
    field = sort.removeprefix("-")
    if field not in runs_service.SORTS:
        raise unprocessable(["query", "sort"],
                            f"sort: unknown field '{field}'; one of {', '.join(sorted(runs_service.SORTS))}.")
    filters = []
    for item in config or []:
        if not CONFIG_FILTER.match(item):
            raise unprocessable(["query", "config"], f"config: '{item}' is not of the form dotted.key=value.")
        key, value = item.split("=", 1)
        filters.append((key.split("."), value))
    rows, count = runs_service.list_runs(
        session=session, statuses=status_, experiment_id=experiment_id, tags=tag, without_tags=not_tag, name_contains=q, config=filters,
        parent_id=parent_id, sort=field, descending=sort.startswith("-"), skip=skip, limit=limit)
    held_out = metrics_service.held_out(session=session, run_ids=[r.id for r in rows])
    judged = health.summaries(session, [r.id for r in rows])
    return RunsPublic(data=[RunSummary.model_validate(r, update={**held_out.get(r.id, {}), "health": judged[r.id]})
                            for r in rows], count=count)


@router.get("/{run_id}", response_model=RunPublic)
def get_run(session: SessionDep, run_id: int):
    return get_run_or_404(session, run_id)


@router.get("/{run_id}/queue", response_model=RunQueue)
def get_run_queue(session: SessionDep, settings: SettingsDep, run_id: int):
    """Why the run has not started: its place in the queue, the runs ahead of it, the runs holding the
    concurrency limit (RLSTUDIO_MAX_CONCURRENT_RUNS), and the same in words. `waiting` is false once it runs."""
    run = get_run_or_404(session, run_id)
    return dispatch_queue.explain(session, run, max_concurrent=settings.max_concurrent_runs, dispatch=settings.dispatch)


@router.patch("/{run_id}", response_model=RunPublic)
def update_run(session: SessionDep, run_id: int, body: RunUpdate):
    run = get_run_or_404(session, run_id)
    changes = {k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None}
    return runs_service.update_run(session=session, run=run, changes=changes)


@router.post("/{run_id}/cancel", response_model=RunPublic)
async def cancel_run(request: Request, session: SessionDep, run_id: int):
    """Stop the run's Ray job (every process gone within seconds) or take it off the queue."""
    run = get_run_or_404(session, run_id)
    if run.status in TERMINAL:
        raise HTTPException(status.HTTP_409_CONFLICT, f"Run {run_id} is already {run.status.value}.")
    submission_id = runs_service.cancel_run(session=session, run=run)
    dispatcher = getattr(request.app.state, "dispatcher", None)
    if submission_id and dispatcher is not None:
        await dispatcher.stop_job(submission_id)
    return run


@router.post("/{run_id}/fork", response_model=RunCreated, status_code=status.HTTP_201_CREATED)
def fork_run(request: Request, session: SessionDep, settings: SettingsDep, run_id: int, body: RunFork):
    """A new run with the parent's config plus these edits, linked to its parent."""
    parent = get_run_or_404(session, run_id)
    tree, resolved = validated_config(parent.preset, run_config.merge(parent.config, body.config), body.overrides,
                                      files_in=_files_in(settings, body.launch))
    run, token = runs_service.create_run(
        session=session, runs_dir=settings.runs_dir, experiment_id=parent.experiment_id,
        name=body.name or f"{parent.name}-fork", preset=parent.preset, config=tree, resolved_config=resolved,
        tags=parent.tags if body.tags is None else body.tags, launch=body.launch, parent=parent, relation="fork")
    _wake_dispatcher(request)
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
    tree, resolved = run_config.resumed(parent.config, parent.resolved_config, checkpoint)
    files_in = _files_in(settings, True)
    try:
        if files_in is not None:
            run_config.check_data_files(tree, files_in)
    except RunConfigError as exc:
        raise config_error(exc) from None
    run, _ = runs_service.create_run(
        session=session, runs_dir=settings.runs_dir, experiment_id=parent.experiment_id,
        name=f"{parent.name}-resumed", preset=parent.preset, config=tree, resolved_config=resolved,
        tags=parent.tags, notes=parent.notes, parent=parent, relation="resume")
    _wake_dispatcher(request)
    return run


@router.delete("/{run_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_run(session: SessionDep, settings: SettingsDep, run_id: int):
    """Deletes the run's data and its directory; refused while it is queued, starting or running."""
    run = get_run_or_404(session, run_id)
    if run.status in ACTIVE:
        raise HTTPException(status.HTTP_409_CONFLICT, f"Run {run_id} is {run.status.value}: cancel it first.")
    runs_service.delete_run(session, run, settings.runs_dir)


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


@ingest_router.post("/{run_id}/status", response_model=IngestResult)
def report_run_status(run: IngestRunDep, session: SessionDep, body: RunStatusReport):
    """The engine's `log_status`: running / succeeded / failed (with `error`), and progress (`fields.step`,
    `fields.total_steps`). Terminal states stick. A `started` report's fields are the run's `facts`."""
    mapped = runs_service.ENGINE_STATUS[body.status]  # the model's enum: these words only
    health.on_heartbeat(session, run, body.fields)  # `fields.phase`: where a stalled run is stuck
    # device, workers, trainable/total parameters: shown on the run page (live, with the run's status event)
    if body.status == "started" and runs_service.record_facts(run, body.fields):
        runs_service.announce(session, run)
    step, total = body.fields.get("step"), body.fields.get("total_steps")
    changed = runs_service.report_status(session=session, run=run, status=mapped, error=body.error,
                                         step=step if isinstance(step, int) else None,
                                         total=total if isinstance(total, int) else None)
    return IngestResult(accepted=int(changed))
