"""wandb / tensorboard / mlflow adapters with the real packages: loggers built from a config as a run builds
them, a few steps logged, then everything read back with each tool's own reader. Nothing leaves the machine:
wandb runs offline (HOME is a temporary folder, so no API key is found), mlflow uses local SQLite stores."""
from __future__ import annotations

import glob
import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.config import ConfigError, build_config
from engine.loggers import build_loggers, check_loggers
from engine.loggers.external import mlflow_key, numeric
from tests.checkout_path import with_checkout

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

KEY = "val-core/arith/reward/mean@1"
ENV = ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL", "WANDB_PROJECT",
       "WANDB_ENTITY", "NETRC", "TENSORBOARD_DIR", "MLFLOW_TRACKING_URI")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # no ~/.netrc key, no ~/.config/wandb settings
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.chdir(tmp_path)
    yield
    teardown = getattr(sys.modules.get("wandb"), "teardown", None)
    if teardown:
        teardown()  # wandb caches settings (and its service) per process


def make(tmp_path, loggers: str, *extra: str):
    cfg = build_config([f"trainer.logger={loggers}", f"trainer.default_local_dir={tmp_path / 'out'}",
                        "trainer.project_name=proj", "trainer.experiment_name=exp",
                        "trainer.log_val_generations=2", *extra])
    return build_loggers(cfg, total_steps=3, progress=False)


def step_metrics(step: int) -> dict:
    return {KEY: 0.1 * step, "actor/pg_loss": np.float32(-0.5), "actor/grad_norm": torch.tensor(2.0),
            "critic/score/mean": float("nan") if step == 2 else 1.0, "actor/ppo_kl": float("inf"),
            "training/epoch": 0, "training/is_last": step == 3, "note": "not a number", "none": None}


SAMPLES = [{"step": 3, "split": "val", "data_source": "arith", "prompt": "1+2=?", "response": "3",
            "ground_truth": "3", "score": 1.0, "tokens": ["3"]},
           {"step": 3, "split": "train", "data_source": "arith", "prompt": "2+2=?", "response": "5",
            "ground_truth": "4", "score": 0.0, "tokens": ["5"]}]


def log_run(tracking, status="succeeded", **fields):
    for step in (1, 2, 3):
        tracking.log_metrics(step, step_metrics(step))
    tracking.log_samples(3, SAMPLES)
    tracking.log_status(status, step=3, **fields)
    tracking.close()
    tracking.close()  # safe twice


# ------------------------------------------------------------------------------------------- tensorboard
def read_tensorboard(directory):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(directory), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_tensorboard_scalars_config_and_generations(tmp_path, capsys):
    log_run(make(tmp_path, "[console,tensorboard]"))
    assert f"tensorboard --logdir {tmp_path / 'out' / 'tensorboard'}" in capsys.readouterr().out
    acc = read_tensorboard(tmp_path / "out" / "tensorboard")
    scalars = acc.Tags()["scalars"]
    assert "note" not in scalars and "none" not in scalars
    assert [(e.step, round(e.value, 4)) for e in acc.Scalars(KEY)] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert [e.value for e in acc.Scalars("actor/pg_loss")] == [-0.5] * 3
    assert [e.value for e in acc.Scalars("actor/grad_norm")] == [2.0] * 3
    assert [e.value for e in acc.Scalars("training/is_last")] == [0.0, 0.0, 1.0]
    score = [e.value for e in acc.Scalars("critic/score/mean")]
    assert score[0] == 1.0 and math.isnan(score[1]) and acc.Scalars("actor/ppo_kl")[0].value == math.inf
    tensors = acc.Tags()["tensors"]
    config = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "| trainer.project_name | proj |" in config
    generations = acc.Tensors("val/generations/text_summary")[0]
    assert generations.step == 3 and "1+2=?" in generations.tensor_proto.string_val[0].decode()
    assert "2+2=?" not in generations.tensor_proto.string_val[0].decode()  # validation samples only
    assert len(tensors) == 2


def test_tensorboard_dir_from_env_and_resume_purges_later_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    first = make(tmp_path, "[tensorboard]")
    for step in (1, 2, 3):  # a run killed after step 3, its checkpoint at step 2
        first.log_metrics(step, {KEY: float(step), "only/killed": 1.0})
    first.close()
    resumed = make(tmp_path, "[tensorboard]")
    resumed.log_status("resumed", step=2, path="global_step_2")
    resumed.log_metrics(3, {KEY: 30.0})
    resumed.close()
    assert not (tmp_path / "out" / "tensorboard").exists()
    acc = read_tensorboard(tmp_path / "tb")
    assert [(e.step, e.value) for e in acc.Scalars(KEY)] == [(1, 1.0), (2, 2.0), (3, 30.0)]
    assert [e.step for e in acc.Scalars("only/killed")] == [1, 2]


# ------------------------------------------------------------------------------------------- mlflow
def mlflow_run(uri, experiment="proj"):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    (run,) = client.search_runs([exp.experiment_id])
    return client, run


def test_mlflow_local_store_metrics_params_and_artifacts(tmp_path, capsys):
    log_run(make(tmp_path, "[console,mlflow]"))
    out = tmp_path / "out"
    uri = f"sqlite:///{out / 'mlflow.db'}"
    assert f"mlflow ui --backend-store-uri {uri}" in capsys.readouterr().out
    client, run = mlflow_run(uri)
    assert run.info.run_name == "exp" and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "val-core/arith/reward/mean_at_1")  # '@' as verl maps it
    assert [(m.step, round(m.value, 4)) for m in history] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    score = [m.value for m in client.get_metric_history(run.info.run_id, "critic/score/mean")]
    assert score[0] == 1.0 and math.isnan(score[1])
    assert client.get_metric_history(run.info.run_id, "actor/ppo_kl")[0].value > 1e300  # SQLite stores inf as max
    assert {"note", "none"}.isdisjoint(run.data.metrics)
    params = run.data.params
    assert params["trainer.project_name"] == "proj" and params["trainer.logger"] == "['console', 'mlflow']"
    assert params["actor_rollout_ref.rollout.n"] == "1" and len(params) > 100  # the whole flattened config
    # artifacts stay beside the store, not in ./mlruns of the working directory
    assert not (tmp_path / "mlruns").exists()
    rows = json.loads(next((out / "mlartifacts").rglob("step_000003.json")).read_text())
    assert rows == [{"step": 3, "data_source": "arith", "prompt": "1+2=?", "response": "3", "ground_truth": "3",
                     "score": 1.0}]


def test_mlflow_tracking_uri_from_env_and_failed_status(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'shared.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    log_run(make(tmp_path, "[mlflow]"), status="failed", error="RuntimeError: boom")
    assert not (tmp_path / "out" / "mlflow.db").exists()
    client, run = mlflow_run(uri)
    assert run.info.status == "FAILED" and run.data.tags["error"] == "RuntimeError: boom"
    assert len(client.get_metric_history(run.info.run_id, "actor/pg_loss")) == 3


def test_mlflow_key_accepts_what_mlflow_rejects():
    from mlflow.utils.validation import _validate_metric_name

    for key in ("val-core/arith/reward/mean@1", "a//b/", "/x/./y/../z", "pass@k (n=8)", "é/ü", "x" * 300):
        _validate_metric_name(mlflow_key(key))
    assert mlflow_key("val-core/openai/gsm8k/reward/mean@4") == "val-core/openai/gsm8k/reward/mean_at_4"


# ------------------------------------------------------------------------------------------- wandb
def wandb_records(run_dir):
    """The records of an offline run's .wandb file: wandb's LevelDB-style log of its own protobuf records."""
    from wandb.proto import wandb_internal_pb2

    (path,) = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    raw = Path(path).read_bytes()
    assert raw[:4] == b":W&B"
    pos, block, chunks = 7, 32768, b""
    while pos + 7 <= len(raw):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a record header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        data, pos = raw[pos + 7:pos + 7 + length], pos + 7 + length
        chunks = data if kind in (1, 2) else chunks + data  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            yield record


def read_wandb(run_dir):
    history, config, exit_code = [], {}, None
    for r in wandb_records(run_dir):
        kind = r.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item})
        elif kind in ("run", "config"):
            updates = r.run.config.update if kind == "run" else r.config.update
            config.update({u.key or ".".join(u.nested_key): json.loads(u.value_json) for u in updates})
        elif kind == "exit":
            exit_code = r.exit.exit_code
    return history, config, exit_code


def log_run_in_fresh_process(tmp_path, loggers: str, status: str = "succeeded", error: str | None = None) -> str:
    """log_run in a new interpreter (wandb keeps process-wide state: a run started in a long test process after
    many other tests once came back without its history); returns its stdout."""
    code = ("import sys; from pathlib import Path; from tests.unit.test_loggers_external import log_run, make; "
            "kw = {'error': sys.argv[4]} if len(sys.argv) > 4 else {}; "
            "log_run(make(Path(sys.argv[1]), sys.argv[2]), status=sys.argv[3], **kw)")
    env = with_checkout()
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path), loggers, status, *([error] if error else [])],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def test_wandb_without_key_logs_offline_under_the_run_output(tmp_path):
    out = log_run_in_fresh_process(tmp_path, "[console,wandb]")
    where = tmp_path / "out" / "wandb"
    assert f"logging offline to {where}" in out
    (run_dir,) = glob.glob(str(where / "offline-run-*"))
    history, config, exit_code = read_wandb(run_dir)
    steps = [h for h in history if KEY in h]
    assert [(h["_step"], round(h[KEY], 4)) for h in steps] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert steps[0]["actor/pg_loss"] == -0.5 and steps[0]["actor/grad_norm"] == 2.0
    assert math.isnan(steps[1]["critic/score/mean"]) and steps[0]["actor/ppo_kl"] == math.inf
    assert all("note" not in h and "none" not in h for h in history)
    assert config["trainer"]["project_name"] == "proj" and config["actor_rollout_ref"]["rollout"]["n"] == 1
    table = json.loads(next((where.parent).rglob("*.table.json")).read_text())
    assert table["columns"][:4] == ["step", "data_source", "prompt", "response"] and len(table["data"]) == 1
    assert exit_code == 0


def test_wandb_mode_and_dir_from_env_and_failed_exit_code(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    out = log_run_in_fresh_process(tmp_path, "[wandb]", status="failed", error="RuntimeError: boom")
    assert "logging offline" not in out  # the user chose offline: no notice
    assert not (tmp_path / "out" / "wandb").exists()
    (run_dir,) = glob.glob(str(tmp_path / "wb" / "wandb" / "offline-run-*"))
    history, _, exit_code = read_wandb(run_dir)
    assert [h["_step"] for h in history if KEY in h] == [1, 2, 3] and exit_code == 1


# ------------------------------------------------------------------------------------------- bad input
def test_unknown_logger_names_the_key_and_closest():
    with pytest.raises(ConfigError, match=r"trainer.logger: unknown logger 'tensorbord'. Did you mean 'tensorboard'"):
        check_loggers(["console", "tensorbord"])
    assert check_loggers("file") == ["file"]


@pytest.mark.parametrize("name,package", [("wandb", "wandb"), ("tensorboard", "tensorboard"),
                                          ("mlflow", "mlflow-skinny")])
def test_missing_package_names_the_key_and_the_install(tmp_path, monkeypatch, name, package):
    monkeypatch.setitem(sys.modules, name, None)  # what an environment without the package gives
    with pytest.raises(ConfigError, match=rf"trainer.logger contains '{name}'.*pip install {package}.*remove"):
        make(tmp_path, f"[console,{name}]")


def test_a_failing_logger_closes_those_already_started(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "unknownscheme://nowhere")
    with pytest.raises(ConfigError, match="mlflow could not start a run"):
        make(tmp_path, "[tensorboard,mlflow]")
    assert read_tensorboard(tmp_path / "out" / "tensorboard").Tags()["tensors"] == ["config/text_summary"]


def test_numeric_keeps_numbers_only():
    assert numeric(np.int64(3)) == 3.0 and numeric(torch.tensor(1.5)) == 1.5 and numeric(True) == 1.0
    assert numeric("1.0") is None and numeric(None) is None and numeric([1.0]) is None
    assert numeric(torch.ones(2)) is None
