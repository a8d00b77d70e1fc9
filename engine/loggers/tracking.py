"""One object that fans each call out to every configured logger."""
from __future__ import annotations

import os
import sys

from engine.loggers.base import Logger

KNOWN = ("console", "file", "wandb", "tensorboard", "mlflow", "dashboard")


class Tracking(Logger):
    def __init__(self, loggers: list[Logger]):
        self.loggers = loggers

    def log_metrics(self, step, metrics):
        for lg in self.loggers:
            lg.log_metrics(step, metrics)

    def log_samples(self, step, samples):
        for lg in self.loggers:
            lg.log_samples(step, samples)

    def log_status(self, status, **fields):
        for lg in self.loggers:
            lg.log_status(status, **fields)

    def close(self):
        for lg in self.loggers:
            try:
                lg.close()
            except Exception as exc:  # noqa: BLE001 - closing one logger must not stop the others
                print(f"[rlstudio] closing {type(lg).__name__} failed: {exc}", file=sys.stderr)


def build_loggers(cfg, total_steps: int, progress: bool = True) -> Tracking:
    tr = cfg.trainer
    names = [tr.logger] if isinstance(tr.logger, str) else list(tr.logger)
    out: list[Logger] = []
    config_dict = cfg.model_dump(mode="json")
    for name in names:
        if name not in KNOWN:
            raise ValueError(f"trainer.logger: unknown logger '{name}'. Known: {', '.join(KNOWN)}.")
        if name == "console":
            from engine.loggers.console import ConsoleLogger

            out.append(ConsoleLogger(total_steps, progress=progress))
        elif name == "file":
            from engine.loggers.file import FileLogger

            out.append(FileLogger(os.path.expanduser(tr.default_local_dir)))
        elif name == "wandb":
            from engine.loggers.external import WandbLogger

            out.append(WandbLogger(tr.project_name, tr.experiment_name, config_dict))
        elif name == "tensorboard":
            from engine.loggers.external import TensorboardLogger

            out.append(TensorboardLogger(os.path.join(os.path.expanduser(tr.default_local_dir), "tensorboard")))
        elif name == "mlflow":
            from engine.loggers.external import MlflowLogger

            out.append(MlflowLogger(tr.project_name, tr.experiment_name, config_dict))
        elif name == "dashboard":
            from engine.loggers.dashboard import DashboardLogger

            out.append(DashboardLogger.from_config(cfg))
    return Tracking(out)
