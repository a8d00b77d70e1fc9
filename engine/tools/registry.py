"""Loading tools from a tool config YAML in verl's format:

    tools:
      - class_name: engine.tools.calculator.CalculatorTool     # module.Class (importable)
        config: {type: native, timeout: 5, tag: c}              # the tool's own options
        tool_schema:
          type: function
          function: {name: calculator, description: ..., parameters: {type: object, properties: {...},
                     required: [expression]}}

`tag` (compact format only) is the call's tag: `<c>12*34</c>`; default the function's name.
"""
from __future__ import annotations

import importlib
import os

import yaml

from engine.errors import ConfigError
from engine.tools.base import Tool

KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"


def _import(class_name: str, where: str):
    module_name, _, attr = str(class_name).rpartition(".")
    if not module_name:
        raise ConfigError(f"{where}: class_name={class_name!r} must be module.Class "
                          "(e.g. engine.tools.calculator.CalculatorTool)")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{where}: cannot import class_name={class_name!r} ({exc})") from None


BUILTIN = "builtin:tools/"  # the configs shipped in engine/tools/configs/ (presets name them so)
CONFIGS = os.path.join(os.path.dirname(__file__), "configs")


def resolve_path(path: str) -> str:
    """`builtin:tools/NAME.yaml` -> engine/tools/configs/NAME.yaml (wherever the job runs); else the path."""
    path = str(path)
    if path.startswith(BUILTIN):
        name = path[len(BUILTIN):]
        shipped = sorted(f for f in os.listdir(CONFIGS) if f.endswith(".yaml"))
        if name not in shipped:
            raise ConfigError(f"{KEY}={path!r}: no such built-in tool config; built in: "
                              f"{', '.join(BUILTIN + f for f in shipped)}", KEY)
        return os.path.join(CONFIGS, name)
    return os.path.expanduser(path)


def load_tools(path: str | None) -> list[Tool]:
    """The tools a config file declares, instantiated; a ConfigError names the file, the entry and the fix."""
    if not path:
        raise ConfigError(f"{KEY} is not set: multi-turn rollouts need a tool config YAML (see engine/tools/README.md)",
                          KEY)
    path = resolve_path(path)
    if not os.path.isfile(path):
        raise ConfigError(f"{KEY}={path!r}: no such file", KEY)
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{KEY}={path!r} is not valid YAML: {exc}", KEY) from None
    entries = doc.get("tools") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{KEY}={path!r}: expected a non-empty list under 'tools:'", KEY)
    tools: list[Tool] = []
    for i, entry in enumerate(entries):
        where = f"{KEY}={path!r}, tools[{i}]"
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ConfigError(f"{where}: each tool needs class_name (and tool_schema, config)")
        schema = entry.get("tool_schema") or {}
        if not isinstance(schema, dict) or not isinstance(schema.get("function"), dict) \
                or not schema["function"].get("name"):
            raise ConfigError(f"{where}: tool_schema needs {{type: function, function: {{name, description, "
                              "parameters}}}}")
        cls = _import(entry["class_name"], where)
        if not (isinstance(cls, type) and issubclass(cls, Tool)):
            raise ConfigError(f"{where}: {entry['class_name']} is not a subclass of engine.tools.Tool")
        tool = cls(dict(entry.get("config") or {}), schema)
        tool.tag = str(tool.config.get("tag", tool.name))
        tools.append(tool)
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise ConfigError(f"{KEY}={path!r}: tool names must be distinct, got {names}", KEY)
    return tools
