"""Run configs: validated and resolved once with the engine's one schema (`engine.config`), stored as the user's
tree and the resolved config; a launch writes the resolved config into the run's directory, and the Ray job runs
`python -m engine.main_ppo --config-file` on it (the job does not resolve it again)."""
from __future__ import annotations

import copy
import math
import re
import shlex
from pathlib import Path
from typing import Any

from engine.config import (
    CONFIG_DIR,
    ConfigError,
    apply_overrides,
    build_config,
    canonical_key,
    format_value,  # noqa: F401 - the one value grammar (engine/config/values.py): runs.py writes config filters with it
    load_named_config,
    merge_trees,
    parse_value,
    save_resolved,
    set_dotted,
)
from engine.config import parse_command as engine_parse_command
from engine.config import preset_names as engine_preset_names

PRESET_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
# The first demo: what `python -m backend --demo` launches and the New run form opens on (the presets API says so
# in its `demo` field). The seed's PPO with all four roles; the GRPO demo (`demo`) is the second preset.
DEMO_PRESET = "demo_ppo"
JOB_CONFIG = "resolved_config.json"  # in the run's directory: the config its job runs


class RunConfigError(ValueError):
    """A config the engine rejects: `field` is the dotted key it names (or None), `message` its words, `fix`
    what to do when the engine says so apart."""

    def __init__(self, message: str, field: str | None, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.fix = fix


def presets_dir() -> Path:
    return CONFIG_DIR


def preset_names() -> list[str]:
    return engine_preset_names(str(presets_dir()))


def load_preset(name: str) -> dict[str, Any]:
    """A preset's tree. Only names listed in the presets folder are read (no paths)."""
    if not PRESET_NAME.match(name) or name not in preset_names():
        raise RunConfigError(f"Unknown preset '{name}'. Available: {', '.join(preset_names()) or 'none'}.", "preset")
    return load_named_config(name, str(presets_dir()))


# one implementation of config-tree editing: the engine's
merge = merge_trees


def validate(preset: str | None, config: dict[str, Any], overrides: list[str]) -> tuple[dict, dict]:
    """(the user's tree = config with overrides applied, the full resolved config as JSON)."""
    if preset is not None:
        load_preset(preset)  # name check before the engine sees it
    try:
        tree = apply_overrides(config, overrides)  # verl 0.9's layout is stored in the canonical one
        resolved = build_config(overrides=overrides, config_name=preset, base=config)
    except ConfigError as exc:
        raise RunConfigError(str(exc), exc.key, exc.fix) from None
    return tree, resolved.model_dump(mode="json")


def parse_command(text: str) -> dict[str, Any]:
    """A pasted command line, parsed by the engine's own override grammar, keys in the canonical layout (the one
    the form shows): {module, config_name, env, overrides: [{op, key, value, raw}], values, deleted, ignored}."""
    cmd = engine_parse_command(text)
    overrides = [{"op": o.op, "key": canonical_key(o.key), "value": _json_safe(o.value), "raw": o.raw}
                 for o in cmd.overrides]
    values: dict[str, Any] = {}
    deleted: list[str] = []
    for o in overrides:  # a later override wins; a delete takes back an earlier set
        if o["op"] == "delete":
            deleted.append(o["key"])
            values.pop(o["key"], None)
        else:
            values[o["key"]] = o["value"]
    return {"module": cmd.module, "config_name": cmd.config_name, "env": cmd.env, "overrides": overrides,
            "values": values, "deleted": deleted, "ignored": cmd.ignored}


def read_value(text: str) -> Any:
    """One typed value as the engine's grammar reads it, JSON-safe (inf and nan stay their text)."""
    return _json_safe(parse_value(text))


def _json_safe(value: Any) -> Any:
    """inf and nan are no JSON: as the text that was pasted (the form then says what it expects)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


DATA_FILE_KEYS = ("train_files", "val_files")


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long for the filesystem, a NUL byte: no such file either
        return False


def check_data_files(tree: dict[str, Any], workdir: Path) -> None:
    """The data files a config names (not the defaults) must exist here, where this server's own Ray head runs
    the job (relative paths from the job's working directory); `builtin:` names must be known ones."""
    from engine import builtins

    data = tree.get("data") if isinstance(tree.get("data"), dict) else {}
    for key in DATA_FILE_KEYS:
        value = data.get(key)
        for name in value if isinstance(value, list) else [value]:
            if not isinstance(name, str) or not name:
                continue
            field = f"data.{key}"
            if name.startswith(builtins.PREFIX):
                try:
                    builtins.check(name)
                except ValueError as exc:
                    raise RunConfigError(f"{field}: {exc}", field) from None
            elif "://" not in name and not _is_file(workdir / Path(name).expanduser()):
                raise RunConfigError(f"{field}: no file '{name}' on the server, where the run reads it (from "
                                     f"{workdir}). Give a path that exists there, or builtin:arith/train.parquet.",
                                     field)
    _check_tool_config(tree, workdir)


TOOL_CONFIG_KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"


def _check_tool_config(tree: dict[str, Any], workdir: Path) -> None:
    """The multi-turn tool config a config names must exist where the job reads it (`builtin:tools/` names must be
    shipped ones), so the run is refused before its job starts rather than when its workers build the rollout."""
    from engine.tools import BUILTIN, resolve_path

    node: Any = tree
    for part in TOOL_CONFIG_KEY.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, str) or not node:
        return
    try:
        path = resolve_path(node)
    except ConfigError as exc:
        raise RunConfigError(exc.message, TOOL_CONFIG_KEY, exc.fix) from None
    if not node.startswith(BUILTIN) and not _is_file(workdir / Path(path)):
        raise RunConfigError(f"{TOOL_CONFIG_KEY}: no file '{node}' on the server, where the run reads it (from "
                             f"{workdir}). Give a path that exists there, or builtin:tools/calculator.yaml.",
                             TOOL_CONFIG_KEY)


# ------------------------------------------------------------------------------------------- the launch
# The keys the server sets on a launch (where the job reports and keeps its checkpoints). None of them is an input
# of a derived key or a cross-field check, so setting them on the resolved config needs no second resolve.
LAUNCH_KEYS = ("trainer.logger", "trainer.dashboard_url", "trainer.default_local_dir")


# The keys a resume sets on its parent's resolved config: where to continue from. The one check on them
# (resume_mode=resume_path needs a path) holds by construction, and nothing is derived from them.
RESUME_KEYS = ("trainer.resume_mode", "trainer.resume_from_path")


def _with_keys(resolved: dict[str, Any], keys: dict[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
    """A resolved config with some keys set, only keys that need no resolving (see LAUNCH_KEYS, RESUME_KEYS)."""
    unknown = set(keys) - set(allowed)
    if unknown:
        raise ValueError(f"{sorted(unknown)} would need the config resolved again")
    out = copy.deepcopy(resolved)
    for key, value in keys.items():
        set_dotted(out, key, value)
    return out


def launch_config(resolved: dict[str, Any], launch: dict[str, Any]) -> dict[str, Any]:
    """The resolved config with the server's launch keys set."""
    return _with_keys(resolved, launch, LAUNCH_KEYS)


def resumed(parent_tree: dict[str, Any], parent_resolved: dict[str, Any], checkpoint: Path) -> tuple[dict, dict]:
    """(the user's tree, the resolved config) of a run that continues its parent from `checkpoint`: the parent's
    resolved config as it ran (not resolved again, so a preset or a default changed since cannot creep in)."""
    keys = {"trainer.resume_mode": "resume_path", "trainer.resume_from_path": str(checkpoint)}
    tree = copy.deepcopy(parent_tree)
    for key, value in keys.items():
        set_dotted(tree, key, value)
    return tree, _with_keys(parent_resolved, keys, RESUME_KEYS)


def write_job_config(run_dir: Path, resolved: dict[str, Any], launch: dict[str, Any]) -> Path:
    """The config the run's job runs, in the run's directory: its resolved config plus the launch keys."""
    return save_resolved(launch_config(resolved, launch), Path(run_dir) / JOB_CONFIG)


def job_entrypoint(python: str, workdir: str, config_file: Path, module: str = "engine.main_ppo") -> str:
    args = ["-m", module, "--config-file", str(config_file)]
    return f"cd {shlex.quote(workdir)} && exec {shlex.quote(python)} " + " ".join(shlex.quote(a) for a in args)
