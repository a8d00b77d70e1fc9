"""Run configuration: one typed schema (schema.py) used by the CLI, the API and the UI form."""
from engine.config.errors import ConfigError
from engine.config.loader import build_config, flatten, merge_trees, set_dotted, validate_tree
from engine.config.overrides import parse_overrides
from engine.config.resolve import world_size
from engine.config.schema import PPOConfig, all_keys


def json_schema() -> dict:
    """The JSON Schema of a run config (the backend validates with it, the UI renders its form from it)."""
    from engine.config.verl_layout import ALIASES

    schema = PPOConfig.model_json_schema()
    schema["title"] = "rlstudio run config"
    # verl 0.9's spelling -> the canonical key (a prefix when it ends with '.'): the UI's command paste maps with it
    schema["x-verl-aliases"] = [list(pair) for pair in ALIASES]
    return schema


__all__ = ["PPOConfig", "ConfigError", "build_config", "validate_tree", "json_schema", "parse_overrides",
           "all_keys", "flatten", "world_size", "merge_trees", "set_dotted"]
