"""trainer.logger with tensorboard, mlflow and wandb on a real (tiny) run: each tool's files hold the same step
metrics as the file logger's metrics.jsonl. And a bad trainer.logger ends the command with a message, exit 2."""
from __future__ import annotations

import glob
import json
import math
import subprocess
import sys

import pytest

from engine.main_ppo import main
from tests.integration.helpers import base_args, engine_env
from tests.unit.test_loggers_external import ENV, read_tensorboard, read_wandb

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-5, abs=1e-6)


@pytest.mark.slow  # a whole engine run
def test_a_run_reaches_tensorboard_mlflow_and_wandb(tiny_model, arith_data, tmp_path):
    out = tmp_path / "run"
    args = base_args(tiny_model, arith_data, out, **{
        "trainer.logger": "[console,file,tensorboard,mlflow,wandb]", "trainer.total_training_steps": 2,
        "trainer.test_freq": 2, "trainer.log_val_generations": 2, "trainer.n_gpus_per_node": 1,
        "trainer.project_name": "proj", "trainer.experiment_name": "exp"})
    env = {k: v for k, v in engine_env().items() if k not in ENV}
    env.update(HOME=str(tmp_path), WANDB_ERROR_REPORTING="false")  # no wandb key anywhere: offline fallback
    result = subprocess.run([sys.executable, "-m", "engine.main_ppo", *args], cwd=tmp_path, env=env, check=False,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "wandb: no API key" in result.stdout and "tensorboard: writing to" in result.stdout

    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    expected = {(r["step"], k): v for r in records for k, v in r["data"].items() if isinstance(v, (int, float))}
    assert ("val-core/arith/reward/mean@1", 2) not in expected and (2, "val-core/arith/reward/mean@1") in expected

    acc = read_tensorboard(out / "tensorboard")
    got = {(e.step, tag): e.value for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)}
    assert got.keys() == expected.keys()
    assert all(same(got[k], float(v)) for k, v in expected.items())
    assert acc.Tensors("val/generations/text_summary")[-1].step == 2

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    assert run.info.run_name == "exp" and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "val-core/arith/reward/mean_at_1")
    assert [(m.step, m.value) for m in history] == [(s, v) for (s, k), v in sorted(expected.items())
                                                    if k == "val-core/arith/reward/mean@1"]
    assert len(run.data.metrics) == len({k for _, k in expected})

    (run_dir,) = glob.glob(str(out / "wandb" / "offline-run-*"))
    history, config, exit_code = read_wandb(run_dir)
    logged = {(h["_step"], k): v for h in history for k, v in h.items() if not k.startswith("_")
              and not k.startswith("val/generations")}
    assert logged.keys() == expected.keys() and exit_code == 0
    assert all(same(float(logged[k]), float(v)) for k, v in expected.items())
    assert config["trainer"]["experiment_name"] == "exp"


@pytest.mark.parametrize("logger,message", [
    ("tensorbord", "trainer.logger: unknown logger 'tensorbord'. Did you mean 'tensorboard'?"),
    ("mlflow", "trainer.logger contains 'mlflow' but the Python package 'mlflow-skinny' is not installed"),
])
def test_bad_logger_is_a_message_not_a_traceback(tiny_model, arith_data, tmp_path, monkeypatch, capsys, logger,
                                                  message):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # an environment without mlflow
    args = base_args(tiny_model, arith_data, tmp_path / "o", **{"trainer.logger": f"[console,{logger}]"})
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
