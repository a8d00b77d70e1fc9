"""Helpers for engine integration tests: run `python -m engine.main_ppo` as a real subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def engine_env() -> dict:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # each run starts (and stops) its own local Ray
    env.update(OMP_WAIT_POLICY="PASSIVE", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def run_engine(args: list[str], cwd: Path, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.main_ppo", *args], check=False, cwd=cwd, env=engine_env() | (env or {}),
                          capture_output=True, text=True, timeout=timeout)


VAL_KEY = "val-core/arith/reward/mean@1"  # the learning tests' held-out accuracy (greedy, 1,000 questions)
SCORE_KEY = "critic/score/mean"  # the training batch's mean reward


def read_records(path: Path) -> list[dict]:
    """A run's metrics.jsonl (or samples.jsonl) as far as it is written: a last line still being written is left out."""
    from engine.loggers.file import read_written

    return read_written(path)


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def validations(records: list[dict], key: str = VAL_KEY) -> list[tuple[int, float]]:
    """(step, value) of a validation metric, in step order."""
    return sorted((r["step"], r["data"][key]) for r in records if key in r["data"])


def target_reached(val: list[tuple[int, float]], gain: float) -> bool:
    """The learning tests' rule: two consecutive validations after training began average at least `gain` above the
    validation before training (step 0's)."""
    return len(val) >= 3 and val[0][0] == 0 and mean(v for _, v in val[-2:]) - val[0][1] >= gain


def run_preset(tmp_path: Path, cache: Path, config: str, *overrides: str, out_name: str = "run",
               stop: Callable[[list[dict]], bool] | None = None,
               env: dict | None = None) -> tuple[list[dict], str, float]:
    """`python -m engine.main_ppo --config-name CONFIG trainer.default_local_dir=tmp_path/OUT_NAME ...` with
    RLSTUDIO_CACHE=cache, as a user runs a preset. With `stop`, the run is stopped as soon as stop(its metrics so far)
    holds (read after each line the run writes; a run of one in-process worker leaves nothing behind and flushes its
    metrics per line). Returns the metrics, the console output and the seconds it ran; fails unless the run ended
    cleanly or was stopped."""
    out = tmp_path / out_name
    start = time.time()
    log = (tmp_path / "console.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "engine.main_ppo", "--config-name", config,
                             f"trainer.default_local_dir={out}", *overrides], cwd=tmp_path,
                            env=engine_env() | {"RLSTUDIO_CACHE": str(cache)} | (env or {}),
                            stdout=log, stderr=subprocess.STDOUT, text=True)

    def ended_or_stopping() -> str | None:
        if proc.poll() is not None:
            return "ended"
        if stop is not None and stop(read_records(out / "metrics.jsonl")):
            return "stop"
        return None

    try:  # the timeout is a hang guard: a learning run on a loaded machine may take many times its quiet time
        stopped = wait_for(ended_or_stopping, 3600, 1.0, f"the {config} run to end or to reach its stop rule",
                           lambda: (tmp_path / "console.log").read_text()[-4000:]) == "stop"
        if stopped:
            proc.terminate()
        proc.wait(timeout=1800)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    elapsed = time.time() - start
    log.seek(0)
    console = log.read()
    log.close()
    assert stopped or proc.returncode == 0, console[-4000:]
    return read_records(out / "metrics.jsonl"), console, elapsed


def base_args(tiny_model: str, data: Path, out: Path, **extra) -> list[str]:
    """A small but complete run on the tiny model: 16 prompts × 4 samples per step on 2 CPU workers."""
    args = {
        "data.train_files": str(data / "train.parquet"),
        "data.val_files": str(data / "test.parquet"),
        "data.train_batch_size": 16,
        "data.max_prompt_length": 32,
        "data.max_response_length": 6,
        "actor_rollout_ref.model.path": tiny_model,
        "actor_rollout_ref.model.enable_gradient_checkpointing": "False",
        "actor_rollout_ref.actor.optim.lr": "1e-4",
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 16,
        "actor_rollout_ref.rollout.name": "naive",
        "actor_rollout_ref.rollout.n": 4,
        "trainer.n_gpus_per_node": 2,
        "trainer.logger": "['console','file']",
        "trainer.default_local_dir": str(out),
        "trainer.val_before_train": "True",
    }
    args.update({k: str(v) for k, v in extra.items()})
    return [f"{k}={v}" for k, v in args.items()]


RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_env() -> dict:
    # Ray drains a node for up to 30 s on SIGTERM (for Serve); these nodes have nothing to drain, so they stop at
    # once (measured: a head's SIGTERM-to-exit 35 s -> 1.6 s).
    # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1: these clusters have several nodes, which Ray's loopback-only switch (the
    # server's own head and the tests' shared head, backend/services/dispatch/local_head.py) refuses; so Ray gives
    # them the machine's address and they listen beyond loopback, token auth on, for the length of one test.
    return engine_env() | {"RAY_AUTH_MODE": "token", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
                           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}


def start_ray_node(num_cpus: int, head_port: int | None = None, dashboard_port: int | None = None) -> subprocess.Popen:
    """`ray start --head` (head_port given) or `ray start --address=127.0.0.1:head_port` (a further node of that
    cluster on this machine: its own ports, so several nodes share one host), in the foreground (--block) and
    in its own process group, so `stop_ray_node` ends it and all it started without touching any other Ray
    on the machine."""
    cmd = [RAY, "start", "--block", "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus}", "--disable-usage-stats",
           f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
           f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
           f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}"]
    if dashboard_port is not None:
        cmd += ["--head", f"--port={head_port}", f"--dashboard-port={dashboard_port}", "--dashboard-host=127.0.0.1",
                "--include-dashboard=true"]
    else:
        cmd += [f"--address=127.0.0.1:{head_port}"]
    return subprocess.Popen(cmd, env=ray_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def stop_ray_node(node: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(node.pid, signal.SIGTERM)
    except ProcessLookupError:  # it exited already (a failed start): the caller still stops the other nodes
        return
    try:
        node.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(node.pid, signal.SIGKILL)
