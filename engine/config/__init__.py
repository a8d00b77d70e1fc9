"""Run configuration: one typed schema (schema.py) used by the CLI, the API and the UI form.

The names below are the package's public face: the backend imports the engine's config through them only."""
from engine.config.argv import config_from_argv
from engine.config.errors import ConfigError
from engine.config.loader import (
    CONFIG_DIR,
    apply_overrides,
    build_config,
    flatten,
    load_named_config,
    merge_trees,
    preset_names,
    set_dotted,
    validate_tree,
)
from engine.config.overrides import Command, CommandOverride, parse_command, parse_overrides
from engine.config.resolve import uses_reference, world_size
from engine.config.resolved import load_resolved, save_resolved
from engine.config.schema import PPOConfig, all_keys
from engine.config.values import command_text, format_value, parse_value, split_choices
from engine.config.verl_layout import ALIASES, canonical_key


def json_schema() -> dict:
    """The JSON Schema of a run config (the backend validates with it, the UI renders its form from it)."""
    schema = PPOConfig.model_json_schema()
    schema["title"] = "rlstudio run config"
    # verl 0.9's spelling -> the canonical key (a prefix when it ends with '.'), for a client that maps keys itself
    # (the New run form's paste box asks POST /config/parse, which maps them)
    schema["x-verl-aliases"] = [list(pair) for pair in ALIASES]
    return schema


__all__ = [
    "CONFIG_DIR",
    "Command",
    "CommandOverride",
    "ConfigError",
    "PPOConfig",
    "all_keys",
    "apply_overrides",
    "build_config",
    "canonical_key",
    "config_from_argv",
    "flatten",
    "command_text",
    "format_value",
    "json_schema",
    "load_named_config",
    "load_resolved",
    "merge_trees",
    "parse_command",
    "parse_overrides",
    "parse_value",
    "preset_names",
    "save_resolved",
    "set_dotted",
    "split_choices",
    "uses_reference",
    "validate_tree",
    "world_size",
]
