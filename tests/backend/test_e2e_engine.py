"""End to end with the real engine: the server launches the demo preset for a few steps through the API as a
Ray job on the tests' shared head (a server's own head is tests/backend/test_dispatch.py's and the UI tests'
job); the run succeeds and its metrics and samples arrive with the expected keys and counts."""
from __future__ import annotations

import sys

import httpx
import pytest

from tests.backend.conftest import HTTP_TIMEOUT, REPO, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STEPS = 2


@pytest.mark.skipif(not (REPO / "engine" / "models" / "tiny_assets").is_dir(),
                    reason="the engine's built-in tiny model is not shipped yet (engine/models/tiny_assets)")
def test_demo_run_through_the_api(server_factory, ray_head, tmp_path):
    env = {"RLSTUDIO_DISPATCH": "true", "RLSTUDIO_RAY_ADDRESS": ray_head.address,
           "RLSTUDIO_RAY_AUTH_TOKEN": ray_head.token, "RLSTUDIO_JOB_PYTHON": sys.executable,
           "RLSTUDIO_JOB_WORKDIR": str(REPO),
           "RLSTUDIO_POLL_INTERVAL_S": "0.5", "OMP_WAIT_POLICY": "PASSIVE"}
    server = server_factory(data_dir=tmp_path / "e2e", env=env).start()
    server.wait_dispatch_ready(180)
    url = f"{server.url}/api/v1"
    created = httpx.post(f"{url}/runs", json={"preset": "demo", "name": "e2e", "overrides": [
        f"trainer.total_training_steps={STEPS}", "trainer.test_freq=-1"]}, timeout=60)
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]

    def finished():
        run = httpx.get(f"{url}/runs/{run_id}", timeout=HTTP_TIMEOUT).json()
        return run if run["status"] in ("succeeded", "failed", "lost", "cancelled") else None

    run = wait_for(finished, 900, 2.0, "the demo run to finish")
    assert run["status"] == "succeeded", (run["error"], run["log_tail"])
    keys = set(httpx.get(f"{url}/runs/{run_id}/metrics/keys", timeout=HTTP_TIMEOUT).json()["data"])
    for key in ("critic/score/mean", "actor/pg_loss", "actor/entropy", "response_length/mean",
                "training/global_step", "val-core/arith/reward/mean@1"):
        assert key in keys, (key, sorted(keys))
    score = httpx.get(f"{url}/runs/{run_id}/metrics", params={"key": "critic/score/mean"}, timeout=HTTP_TIMEOUT).json()
    assert score["data"][0]["steps"] == list(range(1, STEPS + 1))
    cfg = run["resolved_config"]
    per_step = cfg["data"]["train_batch_size"] * cfg["actor_rollout_ref"]["rollout"]["n"]
    train = httpx.get(f"{url}/runs/{run_id}/samples", params={"split": "train", "limit": 1}, timeout=HTTP_TIMEOUT).json()
    assert train["count"] == STEPS * per_step
    steps = httpx.get(f"{url}/runs/{run_id}/samples/steps", timeout=HTTP_TIMEOUT).json()["data"]
    assert {s["step"] for s in steps if s["split"] == "train"} == set(range(1, STEPS + 1))
    assert any(s["split"] == "val" for s in steps)
    sample = train["data"][0]
    assert sample["prompt"] and sample["data_source"] == "arith" and sample["tokens"]
    assert run["progress_step"] == STEPS
    health = httpx.get(f"{url}/runs/{run_id}/health", timeout=HTTP_TIMEOUT).json()  # judged by the server (issue 28)
    assert health["status"] == "ok" and health["checked_step"] == STEPS, health["alarms"]
