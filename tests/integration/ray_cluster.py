"""A Ray cluster on this machine (`ray start`, token auth) that several engine runs join with ray_init.address,
instead of each run starting and stopping a local Ray of its own. tests/integration/conftest.py's `ray_cluster` is one
per pytest session (per xdist worker).

What a run on it sees differs from a local Ray in one way: its workers are started by the cluster's raylet, so they
get the cluster's environment (ray_env()) and the engine's WORKER_ENV, not the environment of the run's command.
Runs that pass variables to their workers through the command's environment keep a local Ray."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.integration.helpers import RAY, free_port, ray_env, start_ray_node, stop_ray_node
from tests.waiting import wait_for

START_GUARD_S = 180  # hang guards on a node joining or leaving, not waits


def listed_nodes(result: subprocess.CompletedProcess) -> list[dict]:
    """`ray list nodes` output while the head comes up: it may fail, or print "No resource in the cluster"
    (exit 0, not JSON) before the head registers itself; both mean no node yet."""
    if result.returncode != 0 or not result.stdout.lstrip().startswith("["):
        return []
    return json.loads(result.stdout)


class RayCluster:
    def __init__(self, num_cpus: int, log_dir: Path):
        self.log_dir = log_dir  # what each `ray start` printed: node-<n>.log
        self.gcs, dashboard = free_port(), free_port()
        self.address = f"127.0.0.1:{self.gcs}"  # what ray_init.address takes
        self.url = f"http://127.0.0.1:{dashboard}"  # the dashboard, which answers the state API (`ray list`)
        # the nodes start in log_dir, as a run's own Ray starts in the run's directory: its workers (and what they
        # start with `python -m`) import the installed packages, as the run's command does, not a checkout that
        # happens to be the test process's working directory
        self.nodes = [start_ray_node(num_cpus=num_cpus, head_port=self.gcs, dashboard_port=dashboard,
                                     log=self._log(0), cwd=log_dir)]
        try:
            self.wait_alive(1)
        except BaseException:
            self.stop()
            raise

    def _log(self, index: int) -> Path:
        return self.log_dir / f"node-{index}.log"

    def alive(self) -> list[dict]:
        """The nodes Ray lists as ALIVE now (none while the head's state API is still starting)."""
        for index, node in enumerate(self.nodes):
            if node.poll() is not None:
                said = self._log(index).read_text(errors="replace")[-3000:] if self._log(index).exists() else ""
                raise AssertionError(f"`ray start` of node {index} of this cluster exited ({node.returncode}):\n{said}")
        result = subprocess.run([RAY, "list", "nodes", "--address", self.url, "--format", "json"], env=ray_env(),
                                capture_output=True, text=True, check=False)
        return [n for n in listed_nodes(result) if n["state"] == "ALIVE"]

    def wait_alive(self, count: int) -> list[dict]:
        def counted() -> list[dict] | None:
            nodes = self.alive()
            return nodes if len(nodes) == count else None

        return wait_for(counted, START_GUARD_S, 1, f"{count} alive node(s) in the Ray cluster")

    def actors(self, class_name: str) -> list[dict]:
        """Every actor of that class the cluster ran (ended ones stay listed), with its node_id."""
        result = subprocess.run([RAY, "list", "actors", "--address", self.url, "--detail", "--filter",
                                 f"class_name={class_name}", "--format", "json"], env=ray_env(), capture_output=True,
                                text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr[-2000:]
        return json.loads(result.stdout)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            stop_ray_node(node)
