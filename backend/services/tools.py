"""A run's tools: declared by its tool config, called in its logged answers."""
from __future__ import annotations

import os
from typing import Any

import yaml
from sqlalchemy import func
from sqlmodel import Session, select

from backend.models import Run, RunTool, RunTools, Sample

MAX_CONFIG_BYTES = 1 << 20


def tool_config_path(run: Run) -> str | None:
    node: Any = run.resolved_config or {}
    for key in ("actor_rollout_ref", "rollout", "multi_turn", "tool_config_path"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, str) and node else None


def declared_tools(path: str) -> tuple[list[str], str | None]:
    """Tool names in a tool config YAML (its tool_schema.function.name entries; the classes are not imported), or
    why they cannot be read here. `builtin:tools/NAME.yaml` is the shipped file; any other path is read only when
    it is a YAML file on this machine (a run dispatched elsewhere may name a file the server does not have)."""
    from engine.config import ConfigError
    from engine.tools import resolve_path

    try:
        local = resolve_path(path)
    except ConfigError as exc:
        return [], str(exc)
    if not local.endswith((".yaml", ".yml")) or not os.path.isfile(local):
        return [], f"{path}: no such YAML file on the server"
    if os.path.getsize(local) > MAX_CONFIG_BYTES:
        return [], f"{path}: larger than {MAX_CONFIG_BYTES} bytes"
    try:
        with open(local, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return [], f"{path}: cannot be read ({type(exc).__name__})"
    entries = doc.get("tools") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        return [], f"{path}: not a tool config (no list under 'tools:')"
    names = []
    for entry in entries:
        schema = entry.get("tool_schema") if isinstance(entry, dict) else None
        function = schema.get("function") if isinstance(schema, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and name:
            names.append(name)
    return names, None


def run_tools(session: Session, run: Run) -> RunTools:
    called: dict[str, int] = {}
    # tool_names is "|a|b|" per answer (backend/models/trajectory.py `summary`): count per distinct set, then split
    stmt = (select(Sample.tool_names, func.count()).where(Sample.run_id == run.id, Sample.tool_names.is_not(None))
            .group_by(Sample.tool_names))
    for names, n in session.exec(stmt).all():
        for name in {t for t in names.strip("|").split("|") if t}:
            called[name] = called.get(name, 0) + n
    path = tool_config_path(run)
    declared, note = declared_tools(path) if path else ([], None)
    data = [RunTool(name=name, declared=name in declared, samples=called.get(name, 0))
            for name in sorted(set(declared) | set(called))]
    return RunTools(data=data, count=len(data), tool_config_path=path, config_note=note)
