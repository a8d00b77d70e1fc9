"""A resolved config as a file: what `python -m engine.config [key=value ...]` prints and the server writes into a run's
directory, read back by `python -m engine.main_ppo --config-file PATH` without resolving it again.

Resolving (defaults, derived keys, cross-field checks) happens once, where the config is made; reading the file
only builds the typed object, so the job runs exactly the config the server checked and shows."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.config.errors import ConfigError
from engine.config.loader import validation_error
from engine.config.schema import PPOConfig

# keys resolve() always fills: a file without them was never resolved (e.g. a preset passed by mistake)
_DERIVED = (("critic", "rollout_n"), ("critic", "enable"), ("algorithm", "use_kl_in_reward"),
            ("actor_rollout_ref", "actor", "ppo_micro_batch_size_per_gpu"))


WRITE_ONE = "Write one with `python -m engine.config [--config-name NAME] [key=value ...] > FILE`"


def save_resolved(config: PPOConfig | dict[str, Any], path: str | Path) -> Path:
    """Write a resolved config as JSON (exact numbers, no YAML typing surprises); atomically, as a job may start."""
    tree = config.model_dump(mode="json") if isinstance(config, PPOConfig) else config
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(tree, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def load_resolved(path: str | Path) -> PPOConfig:
    """The config in a file written by save_resolved (or printed by `python -m engine.config`), as it is."""
    where = f"--config-file {path}"
    try:
        tree = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where}: not a JSON config ({exc}).", None, WRITE_ONE + ".") from None
    for keys in _DERIVED:
        node: Any = tree
        for part in keys:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            raise ConfigError(f"{where}: not a resolved config ({'.'.join(keys)} is not set).", ".".join(keys),
                              WRITE_ONE + ", or pass the named config and the overrides instead (--config-name NAME "
                              "key=value ...).")
    try:
        return PPOConfig.model_validate(tree)
    except ValidationError as exc:
        raise validation_error(exc) from None
