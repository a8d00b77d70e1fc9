"""A local Ray head owned by the server: `ray start --head --block` on 127.0.0.1 with token auth, its own
ports (never Ray's defaults, so it can live beside other clusters) and its own token file; stopped by
signalling the process we started (and, if it lingers, its process group)."""
from __future__ import annotations

import hashlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_token(path: Path) -> str:
    return path.read_text().strip()


def ensure_token(path: Path) -> str:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return read_token(path)


class LocalRayHead:
    def __init__(self, data_dir: Path, num_cpus: int | None = None):
        self.data_dir = data_dir.resolve()
        self.num_cpus = num_cpus
        self.token_path = self.data_dir / "ray" / "auth_token"
        # Ray's unix sockets need a short path: a temp dir named after the data dir.
        tag = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:10]
        self.temp_dir = Path(tempfile.gettempdir()) / f"rlstudio-ray-{tag}"
        self.process: subprocess.Popen | None = None
        self.address: str | None = None
        self.token: str | None = None

    def env(self) -> dict[str, str]:
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path)}

    def start(self, timeout: float = 120.0) -> str:
        self.token = ensure_token(self.token_path)
        dashboard_port = free_port()
        args = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
                "--node-ip-address", "127.0.0.1", "--dashboard-host", "127.0.0.1",
                "--port", str(free_port()), "--dashboard-port", str(dashboard_port),
                "--ray-client-server-port", str(free_port()), "--dashboard-agent-listen-port", str(free_port()),
                "--dashboard-agent-grpc-port", str(free_port()), "--metrics-export-port", str(free_port()),
                "--runtime-env-agent-port", str(free_port()), "--node-manager-port", str(free_port()),
                "--object-manager-port", str(free_port()), "--temp-dir", str(self.temp_dir),
                "--disable-usage-stats", "--include-dashboard", "true"]
        if self.num_cpus is not None:
            args += ["--num-cpus", str(self.num_cpus)]
        log_path = self.data_dir / "ray" / "head.log"
        env = dict(os.environ, **self.env())
        env.pop("RAY_ADDRESS", None)
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        self.address = f"http://127.0.0.1:{dashboard_port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"`ray start --head` exited with {self.process.returncode}; see {log_path}")
            if self._jobs_api_up():
                return self.address
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the local Ray head did not come up within {timeout:.0f}s; see {log_path}")

    def _jobs_api_up(self) -> bool:
        request = urllib.request.Request(f"{self.address}/api/jobs/",
                                         headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self, timeout: float = 15.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)  # `ray start --block` shuts its processes down on SIGTERM
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(process.pid, signal.SIGKILL)  # our own group: anything it left behind
        except (ProcessLookupError, PermissionError):
            pass
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            pass
