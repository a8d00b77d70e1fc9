"""`ray_kwargs.ray_init.runtime_env.*` (verl 0.9's spelling of Ray's runtime_env) reaches the Ray the run starts:
the job's runtime_env holds it and each worker sees its env_vars, over rlstudio's own worker variables. One local
Ray of its own and a probe worker in place of TrainWorker (no model): the launch path of a run, nothing else."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO, engine_env

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # starts a local Ray of its own

PROBE = """
import json, os, sys
import ray
from engine.config import build_config
from engine.workers.launch import start_workers

NAMES = ("RLSTUDIO_PROBE", "TRANSFORMERS_VERBOSITY", "TOKENIZERS_PARALLELISM")

class Probe:  # TrainWorker's constructor, address and init; reports the worker's environment
    def __init__(self, rank, world, *init_args):
        pass
    def address(self):
        return "127.0.0.1", 0
    def init(self, addr, port, uses_ref):
        return {name: os.environ.get(name) for name in NAMES}
    def shutdown(self):
        pass

workers = start_workers(build_config(sys.argv[1:]), 1, "cpu", worker_cls=Probe)
try:
    job = ray.get_runtime_context().runtime_env
    from tests.backend.test_ray_head import listening_beyond_loopback  # the Ray this run started, its worker up
    beyond, total = listening_beyond_loopback(os.getpid())
    print(json.dumps({"launcher": workers.launcher, "owns_ray": workers.owns_ray, "worker": workers.info,
                      "job_env_vars": job.get("env_vars"), "job_keys": sorted(job), "beyond_loopback": beyond,
                      "listening": total}))
finally:
    workers.stop()
"""


def test_a_runtime_env_entry_reaches_the_workers():
    args = ["ray_init.num_cpus=1", "trainer.n_gpus_per_node=1",  # one worker: Ray only because runtime_env asks
            "ray_kwargs.ray_init.runtime_env.py_executable=null",  # asks for nothing
            "ray_kwargs.ray_init.runtime_env.env_vars.RLSTUDIO_PROBE=bar",
            "ray_kwargs.ray_init.runtime_env.env_vars.TRANSFORMERS_VERBOSITY=info"]  # one of rlstudio's own
    result = subprocess.run([sys.executable, "-c", PROBE, *args], check=False, cwd=REPO, env=engine_env(), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["launcher"] == "ray" and report["owns_ray"]
    assert report["beyond_loopback"] == [] and report["listening"] >= 4  # the run's own Ray: loopback only
    assert report["job_env_vars"] == {"RLSTUDIO_PROBE": "bar", "TRANSFORMERS_VERBOSITY": "info"}
    assert "py_executable" not in report["job_keys"]
    assert report["worker"].pop("placement").endswith("ranks 0")
    assert report["worker"] == {"RLSTUDIO_PROBE": "bar", "TRANSFORMERS_VERBOSITY": "info",  # the user's value wins
                                "TOKENIZERS_PARALLELISM": "false"}  # rlstudio's others stay


def test_a_py_executable_that_cannot_start_fails_the_run_with_its_cause():
    """Ray retries a worker whose py_executable cannot start forever (the run used to hang at its first call):
    the launch tries the command first and fails the run naming the key and what the command said."""
    args = ["ray_init.num_cpus=1", "trainer.n_gpus_per_node=1",
            "ray_kwargs.ray_init.runtime_env.py_executable=/nonexistent/python3"]
    result = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=REPO, env=engine_env(), capture_output=True,
                            text=True, timeout=600, check=False)  # a hang guard: the failure comes before any worker starts
    assert result.returncode != 0
    assert "ray_init.runtime_env.py_executable" in result.stderr and "cannot start Ray's workers" in result.stderr
    assert "/nonexistent/python3: No such file or directory" in result.stderr, result.stderr[-3000:]
