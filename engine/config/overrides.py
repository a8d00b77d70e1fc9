"""Parsing of verl/Hydra-style `key=value` command-line overrides.

Values use Hydra's override grammar (lists `[a,b]`, quoted strings, null, numbers like 1e-6); a value
the grammar rejects (e.g. `~/data/train.parquet`) is taken as a plain string, as a user would expect.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from engine.config.errors import ConfigError
from engine.config.values import parse_value


@dataclass
class Override:
    key: str
    value: Any
    add: bool = False  # `+key=value`: a key that is not in the schema is allowed


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
            raise ConfigError(f"Argument '{arg}' has an empty key segment.", key or None)
        out.append(Override(key=key, value=parse_value(raw), add=add))
    return out


# ------------------------------------------------------------------------------ a pasted command line
# The New run form's paste box sends a whole command here (POST /api/v1/config/parse), so the grammar is parsed
# in one place: the one the job itself uses.
LAUNCHERS = {"env", "uv", "run"}
VALUE_FLAGS = {"--config-name", "-cn", "--config-path", "-cp", "--config-dir", "-cd"}
_OVERRIDE = re.compile(r"^(\+\+|\+|~)?([A-Za-z_][\w\-]*(?:\.[\w\-]+)*)(?:=(.*))?$", re.S)
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
_PYTHON = re.compile(r"(^|/)python[\d.]*$")


@dataclass
class CommandOverride:
    op: str  # set (key=v), add (+key=v), force (++key=v), delete (~key or ~key=v)
    key: str
    value: Any  # None for a bare `~key`
    raw: str


@dataclass
class Command:
    module: str | None = None  # `-m engine.main_ppo`, or the script (`main_ppo.py`)
    config_name: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # leading VAR=value assignments
    overrides: list[CommandOverride] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # neither the program, its flags nor an override


def shell_split(text: str) -> list[str]:
    """Split like a POSIX shell (quotes removed, backslash escapes, line continuations), stopping at a pipe,
    redirect, `;`, `&&` or comment: `... 2>&1 | tee log` ends the command."""
    src = re.sub(r"\\\r?\n", " ", text)
    out: list[str] = []
    cur, in_token, i = "", False, 0
    while i < len(src):
        c = src[i]
        if c == "'":
            end = src.find("'", i + 1)
            stop = len(src) if end == -1 else end
            cur, in_token, i = cur + src[i + 1:stop], True, stop + 1
        elif c == '"':
            i += 1
            while i < len(src) and src[i] != '"':
                if src[i] == "\\" and i + 1 < len(src) and src[i + 1] in '"\\$`':
                    cur, i = cur + src[i + 1], i + 2
                else:
                    cur, i = cur + src[i], i + 1
            in_token, i = True, i + 1
        elif c == "\\" and i + 1 < len(src):
            cur, in_token, i = cur + src[i + 1], True, i + 2
        elif c == "#" and not in_token:
            break
        elif c.isspace():
            if in_token:
                out.append(cur)
            cur, in_token, i = "", False, i + 1
        elif c in "|;><" or (c == "&" and not in_token):
            if not (c == ">" and in_token and cur.isdigit()):  # `2>&1`: the 2 is no token
                if in_token:
                    out.append(cur)
            return out
        else:
            cur, in_token, i = cur + c, True, i + 1
    if in_token:
        out.append(cur)
    return out


def parse_command(text: str) -> Command:
    """A verl/rlstudio command line as pasted: `[VAR=v ...] [ray job submit ... --] python -m MODULE
    [--config-name NAME] key=value ...`, or bare `key=value` lines. Values as the job parses them."""
    tokens = shell_split(text)
    cmd = Command()
    i = 0
    while i < len(tokens) and _ENV.match(tokens[i]) and "." not in tokens[i]:
        name, value = tokens[i].split("=", 1)
        cmd.env[name] = value
        i += 1
    if "--" in tokens[i:]:
        dashdash = tokens.index("--", i)
        if {"ray", "submit"} & set(tokens[i:dashdash]):
            i = dashdash + 1
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token in LAUNCHERS or _PYTHON.search(token):
            continue
        if token == "-m" and i < len(tokens):
            cmd.module, i = tokens[i], i + 1
            continue
        if token.startswith("-"):  # --config-name demo, --config-name=demo, -u
            flag, eq, inline = token.partition("=")
            value = inline if eq else None
            if value is None and flag in VALUE_FLAGS and i < len(tokens):
                value, i = tokens[i], i + 1
            if flag in ("--config-name", "-cn"):
                cmd.config_name = value
            continue
        if token.endswith(".py") and cmd.module is None and "=" not in token:
            cmd.module = token
            continue
        m = _OVERRIDE.match(token)
        if m is None or (m.group(3) is None and m.group(1) != "~"):
            cmd.ignored.append(token)
            continue
        prefix, key, raw = m.groups()
        op = {"~": "delete", "++": "force", "+": "add"}.get(prefix or "", "set")
        cmd.overrides.append(CommandOverride(op, key, None if raw is None else parse_value(raw), token))
    return cmd
