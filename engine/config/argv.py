"""The job's command line, verl's: `[--config-path DIR] [--config-name NAME] key=value ...`, resolved here; or
`--config-file PATH`, a config resolved already (engine/config/resolved.py), taken as it is.

A flag of its own rather than Hydra's --config-path/--config-name: those name a config to lay defaults under and
overrides over and then resolve; a resolved file is the outcome of that, and resolving it again could disagree
with the server that resolved it (the run would not be the run it shows)."""
from __future__ import annotations

from engine.config.errors import ConfigError
from engine.config.loader import build_config
from engine.config.resolved import load_resolved
from engine.config.schema import PPOConfig

FLAGS = {"--config-name": "name", "-cn": "name", "--config-path": "path", "-cp": "path", "--config-file": "file"}


def split_argv(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """({'name'|'path'|'file': value}, the other arguments: the overrides)."""
    flags: dict[str, str] = {}
    rest = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=")
        if flag in FLAGS and (eq or i + 1 < len(argv)):
            flags[FLAGS[flag]] = inline if eq else argv[i + 1]
            i += 1 if eq else 2
            continue
        rest.append(arg)
        i += 1
    return flags, rest


def config_from_argv(argv: list[str]) -> PPOConfig:
    flags, overrides = split_argv(argv)
    if "file" in flags:
        if overrides or "name" in flags:
            extra = " ".join(overrides) or f"--config-name {flags['name']}"
            raise ConfigError(f"--config-file takes a resolved config as it is; it cannot be combined with: {extra}.",
                              None, "Edit the file, or pass the named config and the overrides without "
                              "--config-file (they are resolved then).")
        return load_resolved(flags["file"])
    return build_config(overrides, config_name=flags.get("name"), config_path=flags.get("path"))
