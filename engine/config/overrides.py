"""Parsing of verl/Hydra-style `key=value` command-line overrides.

Values use Hydra's override grammar (lists `[a,b]`, quoted strings, null, numbers like 1e-6); a value
the grammar rejects (e.g. `~/data/train.parquet`) is taken as a plain string, as a user would expect.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.config.errors import ConfigError


@dataclass
class Override:
    key: str
    value: Any
    add: bool = False  # `+key=value`: a key that is not in the schema is allowed


def _parse_value(raw: str) -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_override(f"x={raw}")
        return _plain(parsed.value())
    except Exception:  # noqa: BLE001 - anything the grammar rejects is a literal string
        return raw


def _plain(value: Any) -> Any:
    """Hydra returns its own list/dict/sweep types; turn them into plain Python."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "list") and not isinstance(value, str):  # ChoiceSweep etc.
        return [_plain(v) for v in value.list]
    return value


def parse_overrides(args: list[str]) -> list[Override]:
    out = []
    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"Argument '{arg}' is not of the form key=value (e.g. data.train_batch_size=32).")
        key, raw = arg.split("=", 1)
        add = False
        if key.startswith("++"):
            key, add = key[2:], True
        elif key.startswith("+"):
            key, add = key[1:], True
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"Argument '{arg}' has an empty key segment.")
        out.append(Override(key=key, value=_parse_value(raw), add=add))
    return out
