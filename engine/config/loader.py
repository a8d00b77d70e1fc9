"""Building a validated PPOConfig from defaults, a named config file and `key=value` overrides.

Errors are ConfigError with a message that names the key and the fix: unknown keys get the closest
valid keys, wrong types get the key, the expected type and the value given.
"""
from __future__ import annotations

import copy
import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from engine.config.errors import ConfigError
from engine.config.overrides import Override, parse_overrides
from engine.config.resolve import resolve
from engine.config.schema import Extensible, PPOConfig, all_keys, section_type
from engine.config.verl_layout import canonical_key, canonical_tree, unsupported_reason

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


# ------------------------------------------------------------------------------------ schema walking
def _is_dict_field(annotation) -> bool:
    origin = typing.get_origin(annotation)
    if origin is dict:
        return True
    return any(_is_dict_field(a) for a in typing.get_args(annotation))


def _lookup(key: str) -> tuple[str, Any]:
    """Classify a dotted key (either layout): ('leaf'|'section'|'dict'|'extensible'|'unknown', detail)."""
    model: type[BaseModel] = PPOConfig
    parts = canonical_key(key).split(".")
    for i, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            return ("extensible", None) if issubclass(model, Extensible) else ("unknown", None)
        sub = section_type(field.annotation)
        last = i == len(parts) - 1
        if sub is None:
            if not last:
                return ("dict", None) if _is_dict_field(field.annotation) else ("unknown", None)
            return "leaf", field
        if last:
            return "section", sub
        model = sub
    return "unknown", None


def suggest(key: str, n: int = 3) -> list[str]:
    keys = all_keys()
    close = difflib.get_close_matches(key, keys, n=n, cutoff=0.5)
    last = key.split(".")[-1]
    same_leaf = [k for k in keys if k.split(".")[-1] == last and k not in close]
    return (close + same_leaf)[:n] or difflib.get_close_matches(key, keys, n=n, cutoff=0.0)


# ------------------------------------------------------------------------------------ tree utilities
def set_dotted(tree: dict, key: str, value: Any) -> None:
    """Set `a.b.c` in a nested dict, creating sections as needed."""
    node = tree
    parts = key.split(".")
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[parts[-1]] = value


def merge_trees(base: dict, extra: dict) -> dict:
    """Deep merge of two config trees; `extra` wins."""
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_trees(out[k], v)
        else:
            out[k] = v
    return out


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ------------------------------------------------------------------------------------------- checking
def check_keys(overrides: list[Override]) -> None:
    for o in overrides:
        kind, _ = _lookup(o.key)
        reason = unsupported_reason(o.key) if kind in ("unknown", "extensible") else None
        if reason:
            close = difflib.get_close_matches(canonical_key(o.key), all_keys(), n=3, cutoff=0.85)
            if close:  # most likely a typo of a key we have
                raise ConfigError(f"Unknown config key '{o.key}'.", o.key, f"Did you mean: {', '.join(close)}? (A "
                                  f"verl key of that name would be refused: {reason}.)")
            raise ConfigError(f"'{o.key}' is a verl key that rlstudio does not support: {reason}.", o.key)
        if kind == "unknown" or (kind == "extensible" and not o.add):
            raise ConfigError(f"Unknown config key '{o.key}'.", o.key, _unknown_fix(o.key, kind == "extensible"))
        if kind == "section" and not isinstance(o.value, dict) and o.value is not None:
            raise ConfigError(f"'{o.key}' is a section, not a value;", o.key, "set one of its keys, e.g. "
                              f"{', '.join(k for k in all_keys() if k.startswith(o.key + '.'))[:200]}.")


def _unknown_fix(key: str, extensible: bool = False) -> str | None:
    hint = suggest(key)
    parts = (["Did you mean: " + ", ".join(hint) + "?"] if hint else []) + (
        [f"To add a new key to this section, write '+{key}=...'."] if extensible else [])
    return " ".join(parts) or None


def _describe_type(err: dict) -> str:
    kind = err.get("type", "")
    names = {"int_parsing": "an integer", "int_type": "an integer", "float_parsing": "a number",
             "float_type": "a number", "bool_parsing": "true or false", "bool_type": "true or false",
             "string_type": "a string", "list_type": "a list like [a,b]", "dict_type": "a mapping like {a:1}",
             "int_from_float": "an integer"}
    if kind in names:
        return names[kind]
    if kind == "literal_error":
        return "one of " + str(err.get("ctx", {}).get("expected", ""))
    return err.get("msg", "a valid value")


def validation_error(exc: ValidationError, prefix: str = "") -> ConfigError:
    """One ConfigError for pydantic's errors: a line per key, the first key as its key."""
    lines, seen = [], []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"] if not isinstance(p, int)]
        # Union members add their type name to the location (e.g. 'list[str]'): drop those parts.
        loc = [p for p in loc if "[" not in p and p not in ("str", "int", "float", "bool", "none")]
        key = prefix + ".".join(loc)
        if key in seen:
            continue
        seen.append(key)
        if err["type"] == "extra_forbidden":
            hint = suggest(key)
            lines.append(f"Unknown config key '{key}'." + (f" Did you mean: {', '.join(hint)}?" if hint else ""))
        elif err["type"] in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            lines.append(f"Invalid value for '{key}': {err['msg'].lower()}, got {err.get('input')!r}.")
        else:
            lines.append(f"Invalid value for '{key}': expected {_describe_type(err)}, got {err.get('input')!r}.")
    return ConfigError("\n".join(lines), seen[0] if seen else None)


# --------------------------------------------------------------------------------------------- public
def preset_names(config_path: str | None = None) -> list[str]:
    """The named configs (`--config-name`) in `config_path`, by default the ones shipped in engine/configs/."""
    directory = Path(config_path) if config_path else CONFIG_DIR
    return sorted(p.stem for p in directory.glob("*.yaml")) if directory.is_dir() else []


def load_named_config(name: str, config_path: str | None = None) -> dict:
    """A named config's tree as written (either layout), without the defaults under it."""
    directory = Path(config_path) if config_path else CONFIG_DIR
    path = directory / (name if name.endswith(".yaml") else f"{name}.yaml")
    if not path.exists():
        available = preset_names(str(directory))
        raise ConfigError(f"Config '{name}' not found in {directory}.", None,
                          f"Available: {', '.join(available) or 'none'}.")
    tree = yaml.safe_load(path.read_text()) or {}
    tree.pop("defaults", None)
    return tree


def canonical_overrides(parsed: list[Override]) -> list[Override]:
    """Overrides with every key in its canonical spelling (verl 0.9's layout is a second spelling); two
    spellings of one key with different values are an error."""
    canonical_tree({o.key: o.value for o in parsed}, " in the overrides")
    return [Override(canonical_key(o.key), o.value, o.add) for o in parsed]


def canonical_nested(tree: dict, source: str) -> dict:
    """A config tree (file or API payload) in the canonical layout."""
    out: dict = {}
    for key, value in canonical_tree(flatten(tree), source).items():
        set_dotted(out, key, value)
    return out


def apply_overrides(tree: dict, overrides: list[str]) -> dict:
    """`tree` with `key=value` overrides applied, in the canonical layout: the user's own settings, before the
    defaults and a named config are laid under them (build_config checks and resolves them)."""
    out = copy.deepcopy(tree)
    for o in parse_overrides(overrides):
        set_dotted(out, o.key, o.value)
    return canonical_nested(out, "")


def build_config(overrides: list[str] | None = None, config_name: str | None = None,
                 config_path: str | None = None, base: dict | None = None) -> PPOConfig:
    """Defaults <- named config <- base dict <- overrides, validated and resolved. Every source may use the
    seed-era layout or verl 0.9's; the result is in the canonical (seed-era) one."""
    tree: dict = {}
    if config_name:
        file_tree = load_named_config(config_name, config_path)
        check_keys([Override(k, v, add=False) for k, v in flatten(file_tree).items()])
        tree = merge_trees(tree, canonical_nested(file_tree, f" in config '{config_name}'"))
    if base:
        check_keys([Override(k, v, add=True) for k, v in flatten(base).items()])
        tree = merge_trees(tree, canonical_nested(base, ""))
    parsed = parse_overrides(overrides or [])
    check_keys(parsed)
    for o in canonical_overrides(parsed):
        set_dotted(tree, o.key, o.value)
    return validate_tree(tree)


def validate_tree(tree: dict) -> PPOConfig:
    try:
        cfg = PPOConfig.model_validate(tree)
    except ValidationError as exc:
        raise validation_error(exc) from None
    return resolve(cfg)
