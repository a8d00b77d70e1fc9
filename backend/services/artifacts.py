"""A run's files: its directory (checkpoints, exported model), listed, and served without escaping it."""
from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import delete
from sqlmodel import Session, select

from backend.models import Artifact, ArtifactPublic, Run

STEP_DIR = re.compile(r"^global_step_(\d+)$")  # not .tmp_global_step_N (a save cut short)


def checkpoint_dir(run: Run) -> Path | None:
    if run.source == "server" and run.run_dir:
        return Path(run.run_dir) / "checkpoints"
    configured = (run.resolved_config.get("trainer") or {}).get("default_local_dir")
    return Path(configured) if configured else None


def latest_checkpoint(run: Run) -> Path | None:
    """verl's layout: <default_local_dir>/global_step_<N>/ (the highest N)."""
    directory = checkpoint_dir(run)
    if directory is None or not directory.is_dir():
        return None
    steps = [(int(m.group(1)), p) for p in directory.iterdir() if p.is_dir() and (m := STEP_DIR.search(p.name))]
    return max(steps)[1].resolve() if steps else None


def safe_path(root: Path, relative: str) -> Path | None:
    """`root/relative` if it is a regular file inside root after resolving `..` and symlinks, else None."""
    if not relative or "\x00" in relative or relative.startswith(("/", "\\")):
        return None
    base = root.resolve()
    try:
        target = (base / relative).resolve()
    except (OSError, RuntimeError):
        return None
    if target != base and base not in target.parents:
        return None
    return target if target.is_file() else None


def _kind(rel: Path) -> tuple[str, int | None]:
    for part in rel.parts:
        m = STEP_DIR.search(part)
        if m:
            return "checkpoint", int(m.group(1))
    if rel.parts and rel.parts[0] in ("hf_model", "huggingface", "model", "actor_hf"):
        return "model", None
    return "file", None


def scan(session: Session, run: Run, limit: int = 5000) -> list[ArtifactPublic]:
    """Refresh the run's artifact rows from its directory (files only, symlinks skipped)."""
    root = Path(run.run_dir).resolve() if run.run_dir else None
    found: dict[str, tuple[str, int | None, int]] = {}
    if root is not None and root.is_dir():
        for path in sorted(root.rglob("*")):
            if len(found) >= limit:
                break
            if path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(root)
            kind, step = _kind(rel)
            found[rel.as_posix()] = (kind, step, path.stat().st_size)
    existing = {a.path: a for a in session.exec(select(Artifact).where(Artifact.run_id == run.id)).all()}
    gone = [p for p in existing if p not in found]
    if gone:
        session.exec(delete(Artifact).where(Artifact.run_id == run.id, Artifact.path.in_(gone)))
    for rel, (kind, step, size) in found.items():
        row = existing.get(rel) or Artifact(run_id=run.id, path=rel, kind=kind)
        row.kind, row.step, row.size_bytes = kind, step, size
        session.add(row)
    session.commit()
    rows = session.exec(select(Artifact).where(Artifact.run_id == run.id).order_by(Artifact.path)).all()
    return [ArtifactPublic.model_validate(a) for a in rows]
