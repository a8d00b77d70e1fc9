"""The one value grammar of `key=value` overrides (Hydra's): reading a value (`parse_value`), writing one back
(`format_value`), and splitting a sweep's `a,b,c` into its values (`split_choices`). The command line, the server
(the paste box's `POST /config/parse`, the config filter of the runs list), the client's sweeps and the New run
form all follow it: the form has no grammar of its own, it asks the server to read what was typed
(`POST /config/values`) and to write its "As a command" (`POST /config/command`, `command_text` here).

Reading uses Hydra's own parser (lists `[a,b]`, quoted strings, null, numbers like 1e-6); a value the grammar
rejects (e.g. `~/data/train.parquet`) is taken as a plain string, as a user would expect."""
from __future__ import annotations

import functools
import re
from typing import Any


@functools.cache
def _hydra():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def parse_value(raw: str) -> Any:
    """The value an override's text stands for, as plain Python (str, int, float, bool, None, list, dict)."""
    try:
        parsed = _hydra().parse_override(f"x={raw}")
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


_PLAIN = re.compile(r"^[A-Za-z_/.~][A-Za-z0-9_./:@+\-~]*$")
_WORDS = ("null", "true", "false", "nan", "inf")  # a string spelled like these is quoted


def format_value(value: Any) -> str:
    """A value as a `key=value` override writes it, so that parse_value reads it back: lists [a,b], dicts {k:v},
    true/false, null, quoted strings where the bare text would read as something else."""
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
    if _PLAIN.match(text) and text.lower() not in _WORDS:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


_SHELL_PLAIN = re.compile(r"^[\w./:@=+,-]+$")  # no [ ] { }: bash would glob or brace-expand them


def command_text(values: dict[str, Any], config_name: str | None = None, module: str = "engine.main_ppo") -> str:
    """A command a shell runs as is: `python -m MODULE [--config-name NAME]` and one `key=value` per line, each
    value written by `format_value`, a token with shell characters in double quotes."""
    def shell(token: str) -> str:
        return token if _SHELL_PLAIN.match(token) else '"' + re.sub(r'(["\\$`])', r"\\\1", token) + '"'

    head = f"python -m {module}" + (f" --config-name {shell(config_name)}" if config_name else "")
    return " \\\n".join([head, *(f"    {shell(f'{key}={format_value(value)}')}" for key, value in values.items())])


def split_choices(text: str) -> list[str]:
    """A sweep's values as written: '1e-4,3e-4' -> ['1e-4', '3e-4']; commas inside [...], {...}, (...) or quotes
    belong to one value."""
    parts, depth, quote, current = [], 0, None, ""
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += char
    return parts + [current]
