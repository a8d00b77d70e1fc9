"""Helpers for engine integration tests: run `python -m engine.main_ppo` as a real subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def engine_env() -> dict:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # each run starts (and stops) its own local Ray
    env.update(OMP_WAIT_POLICY="PASSIVE", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def run_engine(args: list[str], cwd: Path, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.main_ppo", *args], cwd=cwd, env=engine_env() | (env or {}),
                          capture_output=True, text=True, timeout=timeout)


def base_args(tiny_model: str, data: Path, out: Path, **extra) -> list[str]:
    """A small but complete run on the tiny model: 16 prompts × 4 samples per step on 2 CPU workers."""
    args = {
        "data.train_files": str(data / "train.parquet"),
        "data.val_files": str(data / "test.parquet"),
        "data.train_batch_size": 16,
        "data.max_prompt_length": 32,
        "data.max_response_length": 6,
        "actor_rollout_ref.model.path": tiny_model,
        "actor_rollout_ref.model.enable_gradient_checkpointing": "False",
        "actor_rollout_ref.actor.optim.lr": "1e-4",
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 16,
        "actor_rollout_ref.rollout.name": "naive",
        "actor_rollout_ref.rollout.n": 4,
        "trainer.n_gpus_per_node": 2,
        "trainer.logger": "['console','file']",
        "trainer.default_local_dir": str(out),
        "trainer.val_before_train": "True",
    }
    args.update({k: str(v) for k, v in extra.items()})
    return [f"{k}={v}" for k, v in args.items()]
