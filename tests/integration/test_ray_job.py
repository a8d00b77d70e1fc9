"""The same command under `ray job submit` on an existing cluster started with `ray start --head`
(token auth, 127.0.0.1): the engine joins that cluster instead of starting its own."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.integration.helpers import RAY, base_args, free_port, ray_env, start_ray_node, stop_ray_node

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # its own Ray head and a whole engine run


@pytest.fixture()
def ray_head(tmp_path):
    env = ray_env()
    head = start_ray_node(num_cpus=2, head_port=free_port(), dashboard_port=(dashboard := free_port()))
    url = f"http://127.0.0.1:{dashboard}"
    deadline = time.time() + 120
    while time.time() < deadline:
        ok = subprocess.run([RAY, "job", "list", "--address", url], env=env, capture_output=True)
        if ok.returncode == 0:
            break
        assert head.poll() is None, "ray start --head exited"
        time.sleep(1)
    else:
        pytest.fail("the Ray head's job API did not come up")
    yield url, env
    stop_ray_node(head)


def test_main_ppo_under_ray_job_submit(ray_head, tiny_model, arith_data, tmp_path):
    url, env = ray_head
    out = tmp_path / "job"
    args = base_args(tiny_model, arith_data, out, **{
        "algorithm.adv_estimator": "grpo", "trainer.total_training_steps": 2, "trainer.test_freq": -1,
        "trainer.val_before_train": "False", "trainer.n_gpus_per_node": 1, "trainer.export_hf_model": "False"})
    cmd = [RAY, "job", "submit", "--address", url, "--", sys.executable, "-m", "engine.main_ppo", *args]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-4000:]
    assert "succeeded" in text
    assert "Step 2" in text  # the console logger's line for the last step, streamed back by Ray
    steps = [line for line in (out / "metrics.jsonl").read_text().splitlines() if "training/global_step" in line]
    assert len(steps) == 2
