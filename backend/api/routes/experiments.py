"""Experiments: named groups of runs."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlmodel import Session

from backend.api.deps import SessionDep, SettingsDep
from backend.models import Experiment, ExperimentCreate, ExperimentPublic, ExperimentsPublic, ExperimentUpdate
from backend.services import experiments

router = APIRouter(prefix="/experiments", tags=["experiments"])


def _get(session: Session, experiment_id: int) -> Experiment:
    experiment = session.get(Experiment, experiment_id)
    if experiment is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"Experiment {experiment_id} not found.")
    return experiment


def _name_free(session: Session, name: str, exclude: int | None = None) -> None:
    found = experiments.by_name(session=session, name=name)
    if found is not None and found.id != exclude:
        raise HTTPException(status.HTTP_409_CONFLICT, f"name: an experiment named '{name}' already exists.")


@router.get("", response_model=ExperimentsPublic)
def list_experiments(session: SessionDep, skip: Annotated[int, Query(ge=0)] = 0,
                     limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                     q: Annotated[str | None, Query(max_length=200, description="name contains")] = None):
    rows, count = experiments.list_experiments(session=session, name_contains=q, skip=skip, limit=limit)
    return ExperimentsPublic(data=rows, count=count)


@router.post("", response_model=ExperimentPublic, status_code=status.HTTP_201_CREATED)
def create_experiment(session: SessionDep, body: ExperimentCreate):
    _name_free(session, body.name)
    experiment = experiments.create_experiment(session=session, fields=body.model_dump())
    return experiments.public(session=session, experiment=experiment)


@router.get("/{experiment_id}", response_model=ExperimentPublic)
def get_experiment(session: SessionDep, experiment_id: int):
    return experiments.public(session=session, experiment=_get(session, experiment_id))


@router.patch("/{experiment_id}", response_model=ExperimentPublic)
def update_experiment(session: SessionDep, experiment_id: int, body: ExperimentUpdate):
    experiment = _get(session, experiment_id)
    changes = body.model_dump(exclude_unset=True)
    if changes.get("name") is None:
        changes.pop("name", None)
    if "name" in changes:
        _name_free(session, changes["name"], exclude=experiment_id)
    experiment = experiments.update_experiment(session=session, experiment=experiment, changes=changes)
    return experiments.public(session=session, experiment=experiment)


@router.delete("/{experiment_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_experiment(session: SessionDep, settings: SettingsDep, experiment_id: int):
    """Deletes the experiment with its runs (data and files); refused while one of them is active."""
    experiment = _get(session, experiment_id)
    active = experiments.active_run_ids(session=session, experiment_id=experiment_id)
    if active:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"Experiment {experiment_id} has active runs {active}: cancel them first.")
    experiments.delete_experiment(session=session, experiment=experiment, runs_dir=settings.runs_dir)
