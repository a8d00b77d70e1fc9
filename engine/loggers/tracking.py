"""One object that fans each call out to every configured logger."""
from __future__ import annotations

import os
import sys

from engine.config import ConfigError
from engine.config.resolve import logger_names
from engine.config.vocab import LoggerName
from engine.config.vocab import names as vocabulary
from engine.loggers.base import Logger, report_phase

KNOWN = vocabulary(LoggerName)


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

    def log_phase(self, phase, step, detail=None):
        for lg in self.loggers:  # loggers given to engine.main_ppo.run need not subclass Logger (or take detail)
            report_phase(lg, phase, step, detail)

    def close(self):
        for lg in self.loggers:
            try:
                lg.close()
            except Exception as exc:  # noqa: BLE001 - closing one logger must not stop the others
                print(f"[rlstudio] closing {type(lg).__name__} failed: {exc}", file=sys.stderr)


def check_loggers(names, packages: bool = True) -> list[str]:
    """trainer.logger as a list, every name known and (with `packages`) its package importable; else a
    ConfigError saying what to change (the config validation checks names only, since packages matter where the
    run executes)."""
    import importlib.util

    from engine.loggers.external import PACKAGES, missing_message

    names = logger_names(names)
    for name in names:
        if packages and name in PACKAGES and importlib.util.find_spec(PACKAGES[name][0]) is None:
            raise ConfigError(missing_message(name), "trainer.logger")
    return names


def build_loggers(cfg, total_steps: int, progress: bool = True) -> Tracking:
    tr = cfg.trainer
    names = check_loggers(tr.logger)
    out: list[Logger] = []
    config_dict = cfg.model_dump(mode="json")
    local_dir = os.path.expanduser(tr.default_local_dir)
    n_val = tr.log_val_generations
    try:
        for name in names:
            if name == "console":
                from engine.loggers.console import ConsoleLogger

                out.append(ConsoleLogger(total_steps, progress=progress))
            elif name == "file":
                from engine.loggers.file import FileLogger

                out.append(FileLogger(local_dir))
            elif name == "wandb":
                from engine.loggers.external import WandbLogger

                out.append(WandbLogger(tr.project_name, tr.experiment_name, config_dict, local_dir, n_val))
            elif name == "tensorboard":
                from engine.loggers.external import TensorboardLogger, tensorboard_dir

                out.append(TensorboardLogger(tensorboard_dir(local_dir), config_dict, n_val))
            elif name == "mlflow":
                from engine.loggers.external import MlflowLogger

                out.append(MlflowLogger(tr.project_name, tr.experiment_name, config_dict, local_dir, n_val))
            elif name == "dashboard":
                from engine.loggers.dashboard import DashboardLogger

                out.append(DashboardLogger.from_config(cfg))
    except BaseException:
        Tracking(out).close()  # e.g. a wandb run already started when mlflow then fails
        raise
    return Tracking(out)
