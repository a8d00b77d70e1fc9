"""Model paths in a config: local HF model directories (checked before any worker starts) or hub ids."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> str:
    """Where built-in assets and downloaded wheels are kept (RLSTUDIO_CACHE, default ~/.cache/rlstudio)."""
    return os.path.expanduser(os.environ.get("RLSTUDIO_CACHE", "~/.cache/rlstudio"))


def check_model_path(path: str, key: str) -> str:
    """Expand `~` and fail early with the key to fix when the model directory does not exist."""
    expanded = os.path.expanduser(path)
    if os.path.isdir(expanded):
        if not (Path(expanded) / "config.json").exists():
            raise FileNotFoundError(f"{key}={path}: the directory has no config.json, so it is not an HF model "
                                    f"directory. Point it at a model saved with save_pretrained.")
        return expanded
    if os.environ.get("HF_HUB_OFFLINE") == "1" or "/" not in path or path.startswith(("/", ".", "~")):
        raise FileNotFoundError(
            f"{key}={path}: model directory not found. Use a local HF model directory, e.g. the built-in tiny "
            f"model (`python -m engine.models.tiny --out DIR`) or a random-init one "
            f"(`python -m engine.models.random --arch qwen2.5-0.5b --out DIR`).")
    return path  # a hub id: transformers resolves it when online
