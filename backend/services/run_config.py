"""Run configs: validated with the engine's one schema (`engine.config`), stored as the user's tree, and
turned back into a `python -m engine.main_ppo` command line for the Ray job."""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any


from engine.config import ConfigError, build_config, flatten, merge_trees, parse_overrides, set_dotted
from engine.config.loader import CONFIG_DIR, canonical_nested, check_keys, load_named_config
from engine.config.overrides import Override

PRESET_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
# The first demo: what `python -m backend --demo` launches and the New run form opens on (the presets API says so
# in its `demo` field). The seed's PPO with all four roles; the GRPO demo (`demo`) is the second preset.
DEMO_PRESET = "demo_ppo"


class RunConfigError(ValueError):
    """A config the engine rejects: `field` is the dotted key it names (or None), `message` its words."""

    def __init__(self, message: str, field: str | None):
        super().__init__(message)
        self.message = message
        self.field = field


def field_of(message: str) -> str | None:
    named = re.match(r"^([A-Za-z_]\w*(?:\.\w+)+):", message)  # "trainer.logger: unknown logger 'x'"
    if named:
        return named.group(1)
    quoted = re.search(r"'([A-Za-z_+][\w.+-]*)'", message)
    if quoted:
        return quoted.group(1).lstrip("+")
    leading = re.match(r"^([A-Za-z_][\w]*(?:\.[\w]+)+)", message)
    return leading.group(1) if leading else None


def presets_dir() -> Path:
    return CONFIG_DIR


def preset_names() -> list[str]:
    directory = presets_dir()
    return sorted(p.stem for p in directory.glob("*.yaml")) if directory.is_dir() else []


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
        parsed = parse_overrides(overrides)
        tree = dict(config)
        for o in parsed:
            set_dotted(tree, o.key, o.value)
        tree = canonical_nested(tree, "")  # verl 0.9's layout is stored in the canonical one
        resolved = build_config(overrides=overrides, config_name=preset, base=config)
    except ConfigError as exc:
        message = str(exc)
        raise RunConfigError(message, field_of(message)) from None
    return tree, resolved.model_dump(mode="json")


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


# ------------------------------------------------------------------------------- back to a command line
_PLAIN = re.compile(r"^[A-Za-z_/.~][A-Za-z0-9_./:@+\-~]*$")


def format_value(value: Any) -> str:
    """A value in the override grammar the engine parses (Hydra's): lists [a,b], quoted strings, null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in ("null", "true", "false", "nan", "inf"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def to_overrides(tree: dict[str, Any]) -> list[str]:
    args = []
    for key, value in flatten(tree).items():
        try:
            check_keys([Override(key, value, add=False)])
            prefix = ""
        except ConfigError:
            prefix = "+"  # a key the schema does not list (validated earlier as an extensible section's)
        args.append(f"{prefix}{key}={format_value(value)}")
    return args


def job_entrypoint(python: str, workdir: str, preset: str | None, tree: dict[str, Any],
                   forced: dict[str, Any], module: str = "engine.main_ppo") -> str:
    args = ["-m", module]
    if preset:
        args += ["--config-name", preset]
    args += to_overrides(merge(tree, _nest(forced)))
    return f"cd {shlex.quote(workdir)} && exec {shlex.quote(python)} " + " ".join(shlex.quote(a) for a in args)


def _nest(flat: dict[str, Any]) -> dict:
    tree: dict = {}
    for key, value in flat.items():
        set_dotted(tree, key, value)
    return tree
