"""The training loop (ppo_trainer.py) and what it runs each step.

AFTER_STEP_ENV: the environment variable that names the trainer's after-step hook (hooks.py)."""
from engine.trainer.hooks import ENV as AFTER_STEP_ENV

__all__ = ["AFTER_STEP_ENV"]
