"""Helpers for engine integration tests: run `python -m engine.main_ppo` as a real subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def engine_env() -> dict:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # each run starts (and stops) its own local Ray
    env.update(OMP_WAIT_POLICY="PASSIVE", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def run_engine(args: list[str], cwd: Path, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.main_ppo", *args], cwd=cwd, env=engine_env() | (env or {}),
                          capture_output=True, text=True, timeout=timeout)


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
    return engine_env() | {"RAY_AUTH_MODE": "token", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}


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
