"""`engine.train`: a training run from Python (a notebook, a test), as `python -m engine.main_ppo` runs one.

    from engine import train
    result = train(["--config-name", "demo", "trainer.total_training_steps=5"])
    result.last["actor/pg_loss"], result.metrics[5]["critic/score/mean"]

The arguments are the command line's. The run trains in this process with one worker and starts no Ray,
unless the config asks for Ray: `ray_init.mode=ray`, more than one worker (`trainer.n_gpus_per_node`,
`trainer.nnodes`) or a `ray_init.runtime_env`, which Ray starts as it does for the command line. Mistakes raise
(ConfigError, FileNotFoundError, ...) instead of exiting.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine import metric_names
from engine.loggers.base import Logger


@dataclass
class TrainResult:
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)  # by step; 0: validation before training
    global_step: int = 0  # the last step trained

    @property
    def last(self) -> dict[str, float]:
        """The metrics of the last step trained."""
        return self.metrics.get(self.global_step, {})


class _Collect(Logger):
    def __init__(self, result: TrainResult):
        self.result = result

    def log_metrics(self, step, metrics):
        self.result.metrics.setdefault(int(step), {}).update(
            {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})
        if metric_names.GLOBAL_STEP in metrics:
            self.result.global_step = int(step)


def train(argv: list[str] | None = None) -> TrainResult:
    from engine.config import config_from_argv
    from engine.main_ppo import run

    cfg = config_from_argv(list(argv or []))
    result = TrainResult()
    # one worker stays in this process even where RAY_ADDRESS names a cluster: a notebook's run stays here
    run(cfg, loggers=[_Collect(result)], in_process=True)
    return result
