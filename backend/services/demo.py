"""`python -m backend --demo`: queue the engine's `demo` preset once, so a fresh server has a run to watch."""
from __future__ import annotations

from sqlmodel import Session, select

from backend.models import Run
from backend.services import run_config
from backend.services.runs import announce, experiment_by_name


def ensure_demo_run(app) -> int | None:
    if "demo" not in run_config.preset_names():
        print("rlstudio: no 'demo' preset in engine/configs yet; not launching a demo run.", flush=True)
        return None
    with Session(app.state.engine, expire_on_commit=False) as session:
        existing = session.exec(select(Run).where(Run.preset == "demo")).first()
        if existing is not None:
            return existing.id
        tree, resolved = run_config.validate("demo", {}, [])
        run = Run(experiment_id=experiment_by_name(session, "demo").id, name="demo", preset="demo", config=tree,
                  resolved_config=resolved, tags=["demo"])
        session.add(run)
        session.flush()
        directory = app.state.settings.runs_dir / str(run.id)
        directory.mkdir(parents=True, exist_ok=True)
        run.run_dir = str(directory)
        announce(session, run)
        session.commit()
        print(f"rlstudio: demo run {run.id} queued", flush=True)
        return run.id
