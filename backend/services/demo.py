"""`python -m backend --demo`: queue the first demo (`run_config.DEMO_PRESET`: the tiny arithmetic task with the seed's
PPO) once, so a fresh server has a run to watch."""
from __future__ import annotations

from sqlmodel import Session, select

from backend.models import Run
from backend.services import experiments, run_config
from backend.services.runs import create_run


def ensure_demo_run(app) -> int | None:
    name = run_config.DEMO_PRESET
    if name not in run_config.preset_names():
        print(f"rlstudio: no '{name}' preset in engine/configs; not launching a demo run.", flush=True)
        return None
    with Session(app.state.engine, expire_on_commit=False) as session:
        existing = session.exec(select(Run).where(Run.preset == name)).first()
        if existing is not None:
            return existing.id
        tree, resolved = run_config.validate(name, {}, [])
        run, _ = create_run(session=session, runs_dir=app.state.settings.runs_dir,
                            experiment_id=experiments.get_or_create(session=session, name="demo").id, name="demo",
                            preset=name, config=tree, resolved_config=resolved, tags=["demo"])
        print(f"rlstudio: demo run {run.id} queued", flush=True)
        return run.id
