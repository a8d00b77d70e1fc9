"""The training loop (ppo_trainer.py) and what it runs each step.

HOLD_ENV: the environment variable of the step gate (hold.py) that tests set to stop a run at a known step; a
server that launches jobs passes it on to them."""
from engine.trainer.hold import ENV as HOLD_ENV

__all__ = ["HOLD_ENV"]
