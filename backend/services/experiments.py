"""Experiments: named groups of runs."""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import delete, func
from sqlmodel import Session, select

from backend.models import ACTIVE, Experiment, ExperimentPublic, Run, Webhook
from backend.services.runs import delete_run


def public(*, session: Session, experiment: Experiment) -> ExperimentPublic:
    count = session.exec(select(func.count()).select_from(Run).where(Run.experiment_id == experiment.id)).one()
    return ExperimentPublic.model_validate(experiment, update={"run_count": count})


def list_experiments(*, session: Session, name_contains: str | None, skip: int, limit: int
                     ) -> tuple[list[ExperimentPublic], int]:
    stmt = select(Experiment)
    if name_contains:
        stmt = stmt.where(Experiment.name.icontains(name_contains))  # any case on every database
    count = session.exec(select(func.count()).select_from(stmt.subquery())).one()
    rows = session.exec(stmt.order_by(Experiment.id.desc()).offset(skip).limit(limit)).all()
    return [public(session=session, experiment=e) for e in rows], count


def by_name(*, session: Session, name: str) -> Experiment | None:
    return session.exec(select(Experiment).where(Experiment.name == name)).first()


def get_or_create(*, session: Session, name: str) -> Experiment:
    """The experiment called `name`, made if missing (flushed, not committed)."""
    found = by_name(session=session, name=name)
    if found is None:
        found = Experiment(name=name)
        session.add(found)
        session.flush()
    return found


def create_experiment(*, session: Session, fields: dict) -> Experiment:
    experiment = Experiment.model_validate(fields)
    session.add(experiment)
    session.commit()
    return experiment


def update_experiment(*, session: Session, experiment: Experiment, changes: dict) -> Experiment:
    experiment.sqlmodel_update(changes)
    session.add(experiment)
    session.commit()
    return experiment


def active_run_ids(*, session: Session, experiment_id: int) -> list[int]:
    return list(session.exec(select(Run.id).where(Run.experiment_id == experiment_id, Run.status.in_(ACTIVE))).all())


def delete_experiment(*, session: Session, experiment: Experiment, runs_dir: Path) -> None:
    """With its runs (their data and directories)."""
    for run in session.exec(select(Run).where(Run.experiment_id == experiment.id)).all():
        delete_run(session, run, runs_dir)
    session.exec(delete(Webhook).where(Webhook.experiment_id == experiment.id))
    session.delete(experiment)
    session.commit()
