"""Adapters for wandb, tensorboard and mlflow (used only when installed)."""
from __future__ import annotations

from engine.loggers.base import Logger


def _require(module: str, logger_name: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise RuntimeError(f"trainer.logger contains '{logger_name}' but the package '{module}' is not installed: "
                           f"pip install {module.split('.')[0]}, or remove '{logger_name}' from trainer.logger.") from None


class WandbLogger(Logger):
    def __init__(self, project: str, name: str, config: dict):
        self.wandb = _require("wandb", "wandb")
        self.run = self.wandb.init(project=project, name=name, config=config)

    def log_metrics(self, step, metrics):
        self.run.log(metrics, step=step)

    def close(self):
        self.run.finish()


class TensorboardLogger(Logger):
    def __init__(self, directory: str):
        tb = _require("torch.utils.tensorboard", "tensorboard")
        self.writer = tb.SummaryWriter(directory)

    def log_metrics(self, step, metrics):
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)

    def close(self):
        self.writer.close()


class MlflowLogger(Logger):
    def __init__(self, project: str, name: str, config: dict):
        self.mlflow = _require("mlflow", "mlflow")
        self.mlflow.set_experiment(project)
        self.mlflow.start_run(run_name=name)
        from engine.config import flatten

        self.mlflow.log_params({k: str(v)[:250] for k, v in flatten(config).items()})

    def log_metrics(self, step, metrics):
        # mlflow rejects some characters in keys (e.g. '@'): replace them
        self.mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in metrics.items()}, step=step)

    def close(self):
        self.mlflow.end_run()
