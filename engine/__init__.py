"""rlstudio engine: PPO/GRPO post-training with a single controller and FSDP2 workers.

`from engine import train` runs a training run from Python (engine/api.py); it is imported on first use, so
`import engine.config` stays free of torch.
"""


def __getattr__(name: str):
    if name in ("train", "TrainResult"):
        from engine import api

        return getattr(api, name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
