"""The same command under `ray job submit` on an existing cluster started with `ray start --head`
(token auth, 127.0.0.1; the tests' shared head, tests/conftest.py): the engine joins that cluster instead of
starting its own."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.helpers import RAY, base_args, ray_env

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # a Ray head and a whole engine run


def test_main_ppo_under_ray_job_submit(ray_head, tiny_model, arith_data, tmp_path):
    url, env = ray_head.address, ray_env() | ray_head.env()
    out = tmp_path / "job"
    args = base_args(tiny_model, arith_data, out, **{
        "algorithm.adv_estimator": "grpo", "trainer.total_training_steps": 2, "trainer.test_freq": -1,
        "trainer.val_before_train": "False", "trainer.n_gpus_per_node": 1, "trainer.export_hf_model": "False"})
    cmd = [RAY, "job", "submit", "--address", url, "--", sys.executable, "-m", "engine.main_ppo", *args]
    result = subprocess.run(cmd, env=env, check=False, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-4000:]
    assert "succeeded" in text
    assert "Step 2" in text  # the console logger's line for the last step, streamed back by Ray
    steps = [line for line in (out / "metrics.jsonl").read_text().splitlines() if "training/global_step" in line]
    assert len(steps) == 2
