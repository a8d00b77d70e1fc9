"""Adapters for wandb, tensorboard and mlflow, named in trainer.logger as in verl.

Where each writes (`out` = trainer.default_local_dir, default checkpoints/<project>/<experiment>):
- tensorboard: $TENSORBOARD_DIR (the run's own log dir, as in verl) else out/tensorboard.
- mlflow: $MLFLOW_TRACKING_URI else a SQLite store out/mlflow.db with artifacts in out/mlartifacts;
  experiment = trainer.project_name, run name = trainer.experiment_name (verl's mapping).
- wandb: project/name as in verl; files under $WANDB_DIR else out/wandb/. WANDB_MODE is honoured; with no
  WANDB_MODE and no API key the run is logged offline (one console line says so) instead of prompting.

Metrics: only numeric values are sent (others are skipped); NaN/inf pass through as each tool stores them.
The config goes to wandb's config, mlflow's params (flattened) and a tensorboard text panel. Validation
generations (trainer.log_val_generations of them per validation, verl's key; default 0) go to a wandb table,
a tensorboard text panel and an mlflow JSON artifact.
"""
from __future__ import annotations

import importlib
import json
import math
import netrc
import numbers
import os
import re
import sys
import time
from typing import Any
from urllib.parse import urlparse

from engine.config import ConfigError, flatten
from engine.loggers.base import Logger

# logger name -> (module to import, pip package that provides it)
PACKAGES = {"wandb": ("wandb", "wandb"), "tensorboard": ("tensorboard", "tensorboard"),
            "mlflow": ("mlflow", "mlflow-skinny")}
SAMPLE_FIELDS = ("step", "data_source", "prompt", "response", "ground_truth", "score")


class LoggerSetupError(ConfigError):
    """A logger named in trainer.logger cannot start; the message says how to fix it (no traceback)."""


def missing_message(name: str) -> str:
    pip_name = PACKAGES[name][1]
    return (f"trainer.logger contains '{name}' but the Python package '{pip_name}' is not installed in "
            f"{sys.prefix}: run `{sys.executable} -m pip install {pip_name}`, or remove '{name}' from "
            f"trainer.logger (e.g. trainer.logger=[console,file]).")


def require(name: str):
    try:
        return importlib.import_module(PACKAGES[name][0])
    except ImportError:
        raise LoggerSetupError(missing_message(name)) from None


def _say(line: str) -> None:
    print(f"[rlstudio] {line}", flush=True)


def numeric(value: Any) -> float | None:
    """The value as a float, or None for what no tracker can plot (strings, None, lists)."""
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # numpy / torch scalars
        try:
            value = value.item()
        except (TypeError, ValueError):
            return None
    if isinstance(value, numbers.Real):  # bool included: plotted as 0/1
        return float(value)
    return None


def numeric_items(metrics: dict[str, Any]):
    for key, value in metrics.items():
        number = numeric(value)
        if number is not None:
            yield str(key), number


def val_generations(samples: list[dict], limit: int) -> list[dict]:
    """The first `limit` validation samples of a step, with the readable fields only (no token arrays)."""
    if limit <= 0:
        return []
    rows = [s for s in samples if s.get("split") == "val"][:limit]
    return [{k: s.get(k) for k in SAMPLE_FIELDS} for s in rows]


class _Guarded(Logger):
    """A tracker that fails mid-run (server gone, disk full) must not end a training run: warn, go on."""

    name = "logger"
    _failures = 0

    def _failed(self, what: str, exc: Exception) -> None:
        self._failures += 1
        if self._failures == 1 or self._failures % 100 == 0:
            print(f"[rlstudio] {self.name}: {what} failed ({type(exc).__name__}: {exc}); training goes on "
                  f"({self._failures} failure(s) so far)", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- wandb
def _wandb_has_credentials(settings) -> bool:
    # Mirrors wandb's own lookup (env, settings, ~/.netrc for the server's host) without its prompt.
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    if getattr(settings, "api_key", None):
        return True
    host = urlparse(str(getattr(settings, "base_url", "") or "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC") or None).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class WandbLogger(_Guarded):
    name = "wandb"

    def __init__(self, project: str, name: str, config: dict, directory: str, log_val_generations: int = 0):
        self.wandb = wandb = require("wandb")
        self.limit = log_val_generations
        self.exit_code = 0
        kwargs: dict[str, Any] = {}
        if not os.environ.get("WANDB_DIR"):  # wandb's own default would be ./wandb in the working directory
            os.makedirs(directory, exist_ok=True)
            kwargs["dir"] = directory
        settings = wandb.setup().settings  # WANDB_MODE, `wandb offline`, settings files
        if not os.environ.get("WANDB_MODE") and settings.mode not in ("offline", "dryrun", "disabled") \
                and not _wandb_has_credentials(settings):
            kwargs["mode"] = "offline"
            where = os.path.join(os.environ.get("WANDB_DIR") or directory, "wandb")
            _say(f"wandb: no API key (WANDB_API_KEY or `wandb login`), logging offline to {where}; upload later "
                 f"with `wandb sync {where}/offline-run-*`. Set WANDB_MODE=offline to silence this line.")
        try:
            self.run = wandb.init(project=project, name=name, config=config, **kwargs)
        except Exception as exc:  # noqa: BLE001 - auth/network errors come as several types
            raise LoggerSetupError(
                f"trainer.logger: wandb could not start a run ({type(exc).__name__}: {exc}). Check WANDB_API_KEY "
                "and the network, or set WANDB_MODE=offline to log locally (`wandb sync` uploads it later), or "
                "remove 'wandb' from trainer.logger.") from None

    def log_metrics(self, step, metrics):
        try:
            self.run.log(dict(numeric_items(metrics)), step=step)
        except Exception as exc:  # noqa: BLE001
            self._failed("log", exc)

    def log_samples(self, step, samples):
        rows = val_generations(samples, self.limit)
        if not rows:
            return
        try:
            table = self.wandb.Table(columns=list(SAMPLE_FIELDS),
                                     data=[[_cell(r[k]) for k in SAMPLE_FIELDS] for r in rows])
            self.run.log({"val/generations": table}, step=step)
        except Exception as exc:  # noqa: BLE001
            self._failed("table", exc)

    def log_status(self, status, **fields):
        if status == "failed":
            self.exit_code = 1

    def close(self):
        if self.run is not None:
            run, self.run = self.run, None
            run.finish(exit_code=self.exit_code)


def _cell(value):
    return value if value is None or isinstance(value, (str, int, float, bool)) else json.dumps(value, default=str)


# ------------------------------------------------------------------------------------------- tensorboard
def tensorboard_dir(default_local_dir: str) -> str:
    return os.environ.get("TENSORBOARD_DIR") or os.path.join(default_local_dir, "tensorboard")


class TensorboardLogger(_Guarded):
    name = "tensorboard"

    def __init__(self, directory: str, config: dict | None = None, log_val_generations: int = 0):
        require("tensorboard")  # torch.utils.tensorboard imports it; a clear message if it is missing
        from torch.utils.tensorboard import SummaryWriter

        self.SummaryWriter = SummaryWriter
        self.directory = directory
        self.limit = log_val_generations
        os.makedirs(directory, exist_ok=True)
        self.writer = SummaryWriter(directory)
        if config:
            self.writer.add_text("config", _markdown_table(flatten(config).items(), ("key", "value")), 0)
        _say(f"tensorboard: writing to {directory} (view: tensorboard --logdir {directory})")

    def log_metrics(self, step, metrics):
        try:
            for key, value in numeric_items(metrics):
                self.writer.add_scalar(key, value, step)
            self.writer.flush()  # readable while the run goes on (SummaryWriter otherwise waits 120 s)
        except Exception as exc:  # noqa: BLE001
            self._failed("add_scalar", exc)

    def log_samples(self, step, samples):
        rows = val_generations(samples, self.limit)
        if rows:
            try:
                table = _markdown_table([[r[k] for k in SAMPLE_FIELDS] for r in rows], SAMPLE_FIELDS)
                self.writer.add_text("val/generations", table, step)
                self.writer.flush()
            except Exception as exc:  # noqa: BLE001
                self._failed("add_text", exc)

    def log_status(self, status, **fields):
        if status == "resumed":  # hide what a killed run logged after the checkpoint (TensorBoard's purge_step)
            self.writer.close()
            self.writer = self.SummaryWriter(self.directory, purge_step=int(fields.get("step", 0)) + 1)

    def close(self):
        self.writer.close()


def _markdown_table(rows, header) -> str:
    def cell(v):
        text = v if isinstance(v, str) else json.dumps(v, default=str)
        return text.replace("|", "\\|").replace("\n", "\\n")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- mlflow
_MLFLOW_BAD = re.compile(r"[^/\w.\- :]")


def mlflow_key(key: str) -> str:
    """A metric/param name MLflow accepts: '@' -> '_at_' as verl does, other characters it rejects -> '_',
    and no empty, '.' or '..' path segments (MLflow rejects names that are not normalized paths)."""
    key = _MLFLOW_BAD.sub("_", key.replace("@", "_at_"))
    parts = [p if p not in (".", "..") else p.replace(".", "_") for p in key.split("/") if p]
    return "/".join(parts)[:250] or "_"


def mlflow_uri(default_local_dir: str) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///" + os.path.abspath(
        os.path.join(default_local_dir, "mlflow.db"))


class MlflowLogger(_Guarded):
    name = "mlflow"

    def __init__(self, project: str, name: str, config: dict, directory: str, log_val_generations: int = 0):
        require("mlflow")
        from mlflow.entities import Metric, Param
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

        self.limit = log_val_generations
        self.status = "FINISHED"
        self.uri = mlflow_uri(directory)
        local = not os.environ.get("MLFLOW_TRACKING_URI")
        if local:
            os.makedirs(directory, exist_ok=True)
        try:
            self.client = client = MlflowClient(tracking_uri=self.uri)
            experiment = client.get_experiment_by_name(project)
            if experiment is None:
                # our local store keeps artifacts beside it, not in ./mlruns of the working directory
                artifacts = os.path.abspath(os.path.join(directory, "mlartifacts")) if local else None
                try:
                    experiment_id = client.create_experiment(project, artifact_location=artifacts)
                except MlflowException:  # created meanwhile by a concurrent run
                    experiment_id = client.get_experiment_by_name(project).experiment_id
            else:
                experiment_id = experiment.experiment_id
            self.run_id = client.create_run(experiment_id, run_name=name, tags=_mlflow_context_tags()).info.run_id
            params = [Param(mlflow_key(k), str(v)[:MAX_PARAM_VAL_LENGTH]) for k, v in flatten(config).items()]
            client.log_batch(self.run_id, params=params)
        except MlflowException as exc:
            raise LoggerSetupError(f"trainer.logger: mlflow could not start a run at {self.uri} ({exc.message}). "
                                   "Check MLFLOW_TRACKING_URI, or remove 'mlflow' from trainer.logger.") from None
        self.Metric = Metric
        ui = f"mlflow ui --backend-store-uri {self.uri}" if local else self.uri
        _say(f"mlflow: run '{name}' in experiment '{project}' at {self.uri} (view: {ui})")

    def log_metrics(self, step, metrics):
        now = int(time.time() * 1000)
        batch = {mlflow_key(k): v for k, v in numeric_items(metrics)}
        try:
            self.client.log_batch(self.run_id, metrics=[self.Metric(k, v, now, step) for k, v in batch.items()])
        except Exception as exc:  # noqa: BLE001
            self._failed("log_batch", exc)

    def log_samples(self, step, samples):
        rows = val_generations(samples, self.limit)
        if rows:
            try:
                self.client.log_dict(self.run_id, _finite(rows), f"val_generations/step_{step:06d}.json")
            except Exception as exc:  # noqa: BLE001
                self._failed("log_dict", exc)

    def log_status(self, status, **fields):
        if status == "failed":
            error = str(fields.get("error") or "")
            self.status = "KILLED" if error.startswith("KeyboardInterrupt") else "FAILED"
            try:
                self.client.set_tag(self.run_id, "error", error[:5000])
            except Exception as exc:  # noqa: BLE001
                self._failed("set_tag", exc)
        elif status == "resumed":
            try:
                self.client.set_tag(self.run_id, "resumed_from_step", str(fields.get("step")))
            except Exception as exc:  # noqa: BLE001
                self._failed("set_tag", exc)

    def close(self):
        if self.run_id is not None:
            run_id, self.run_id = self.run_id, None
            self.client.set_terminated(run_id, self.status)


def _mlflow_context_tags() -> dict:
    # what mlflow.start_run would add (source script, user, git commit); optional, never fatal
    try:
        from mlflow.tracking.context.registry import resolve_tags

        return resolve_tags()
    except Exception:  # noqa: BLE001
        return {}


def _finite(rows: list[dict]) -> list[dict]:
    # JSON artifacts: NaN would make an invalid file
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()} for r in rows]
