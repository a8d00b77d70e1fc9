from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy import func
from sqlmodel import select

from backend.api.deps import SessionDep, SettingsDep
from backend.models import (
    ACTIVE,
    Experiment,
    ExperimentCreate,
    ExperimentPublic,
    ExperimentsPublic,
    ExperimentUpdate,
    Run,
)
from backend.services.runs import count_runs, delete_run

router = APIRouter(prefix="/experiments", tags=["experiments"])


def _get(session, experiment_id: int) -> Experiment:
    experiment = session.get(Experiment, experiment_id)
    if experiment is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"Experiment {experiment_id} not found.")
    return experiment


def _public(session, experiment: Experiment) -> ExperimentPublic:
    return ExperimentPublic.model_validate(experiment, update={"run_count": count_runs(session, experiment.id)})


def _name_taken(session, name: str, exclude: int | None = None) -> None:
    found = session.exec(select(Experiment).where(Experiment.name == name)).first()
    if found is not None and found.id != exclude:
        raise HTTPException(status.HTTP_409_CONFLICT, f"name: an experiment named '{name}' already exists.")


@router.get("", response_model=ExperimentsPublic)
def list_experiments(session: SessionDep, skip: Annotated[int, Query(ge=0)] = 0,
                     limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                     q: Annotated[str | None, Query(max_length=200, description="name contains")] = None):
    stmt = select(Experiment)
    if q:
        stmt = stmt.where(Experiment.name.contains(q))
    count = session.exec(select(func.count()).select_from(stmt.subquery())).one()
    rows = session.exec(stmt.order_by(Experiment.id.desc()).offset(skip).limit(limit)).all()
    return ExperimentsPublic(data=[_public(session, e) for e in rows], count=count)


@router.post("", response_model=ExperimentPublic, status_code=status.HTTP_201_CREATED)
def create_experiment(session: SessionDep, body: ExperimentCreate):
    _name_taken(session, body.name)
    experiment = Experiment.model_validate(body)
    session.add(experiment)
    session.commit()
    return _public(session, experiment)


@router.get("/{experiment_id}", response_model=ExperimentPublic)
def get_experiment(session: SessionDep, experiment_id: int):
    return _public(session, _get(session, experiment_id))


@router.patch("/{experiment_id}", response_model=ExperimentPublic)
def update_experiment(session: SessionDep, experiment_id: int, body: ExperimentUpdate):
    experiment = _get(session, experiment_id)
    changes = body.model_dump(exclude_unset=True)
    if changes.get("name") is None:
        changes.pop("name", None)
    if "name" in changes:
        _name_taken(session, changes["name"], exclude=experiment_id)
    experiment.sqlmodel_update(changes)
    session.add(experiment)
    session.commit()
    return _public(session, experiment)


@router.delete("/{experiment_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_experiment(session: SessionDep, settings: SettingsDep, experiment_id: int):
    """Deletes the experiment with its runs (data and files); refused while one of them is active."""
    experiment = _get(session, experiment_id)
    runs = session.exec(select(Run).where(Run.experiment_id == experiment_id)).all()
    active = [r.id for r in runs if r.status in ACTIVE]
    if active:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"Experiment {experiment_id} has active runs {active}: cancel them first.")
    for run in runs:
        delete_run(session, run, settings.runs_dir)
    session.delete(experiment)
    session.commit()
