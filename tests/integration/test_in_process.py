"""The engine without Ray: `engine.train` runs a tiny GRPO run inside this test's own process (no Ray started,
the metrics returned), and the same seeded run gives the same losses step by step in-process and through Ray
with one worker (`ray_init.mode`)."""
from __future__ import annotations

import json
import math
import sys

import psutil
import pytest

from tests.integration.helpers import base_args, run_engine

ONE_WORKER = {"algorithm.adv_estimator": "grpo", "trainer.n_gpus_per_node": 1, "data.train_batch_size": 8,
              "actor_rollout_ref.actor.ppo_mini_batch_size": 8, "trainer.total_training_steps": 3,
              "trainer.val_before_train": "False", "trainer.test_freq": 3, "trainer.logger": "[console,file]"}
KEYS = ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "critic/score/mean", "response_length/mean")


def test_train_api_runs_in_this_process_without_ray(tiny_model, arith_data, tmp_path):
    from engine import train

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = train(base_args(tiny_model, arith_data, tmp_path / "run", **ONE_WORKER))

    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    started = [p.name() for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not [n for n in started if "ray" in n or "gcs" in n], f"processes started: {started}"
    assert result.global_step == 3 and sorted(result.metrics) == [1, 2, 3]
    for step in (1, 2, 3):
        m = result.metrics[step]
        assert m["training/global_step"] == step
        assert math.isfinite(m["actor/pg_loss"]) and m["actor/grad_norm"] > 0
    assert "val-core/arith/reward/mean@1" in result.last  # validation at the last step
    # the same metrics the file logger wrote
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {r["step"]: r["data"]["actor/pg_loss"] for r in logged} == {
        s: m["actor/pg_loss"] for s, m in result.metrics.items()}


def test_train_api_refuses_several_workers_in_process(tiny_model, arith_data, tmp_path):
    from engine import train
    from engine.config import ConfigError

    args = base_args(tiny_model, arith_data, tmp_path / "run", **{**ONE_WORKER, "ray_init.mode": "in_process",
                                                                  "trainer.n_gpus_per_node": 2})
    with pytest.raises(ConfigError, match="ray_init.mode=in_process runs one worker"):
        train(args)


@pytest.mark.ray
@pytest.mark.slow  # two engine runs
def test_in_process_and_ray_give_the_same_losses(tiny_model, arith_data, tmp_path):
    steps = {}
    for mode in ("in_process", "ray"):
        out = tmp_path / mode
        # one CPU thread in both (a Ray worker gets ray_init.num_cpus; in-process, this process's threads); two steps
        # (the second's losses follow the first's update) and no validation: the losses are what is compared
        args = base_args(tiny_model, arith_data, out, **{**ONE_WORKER, "ray_init.mode": mode, "ray_init.num_cpus": 1,
                                                         "trainer.total_training_steps": 2, "trainer.test_freq": -1})
        result = run_engine(args, tmp_path, env={"OMP_NUM_THREADS": "1"})
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert f"launcher={mode.replace('_', '-')}" in result.stdout
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        steps[mode] = {r["step"]: r["data"] for r in records}
    assert sorted(steps["in_process"]) == sorted(steps["ray"]) == [1, 2]
    for step in (1, 2):
        for key in KEYS:
            a, b = steps["in_process"][step][key], steps["ray"][step][key]
            assert a == pytest.approx(b, rel=1e-5, abs=1e-7), f"step {step} {key}: in-process {a} vs Ray {b}"
