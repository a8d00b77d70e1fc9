"""Not an open door: `python -m backend --host 0.0.0.0` (a real server subprocess) without RLSTUDIO_API_TOKEN
generates a token, prints it once and refuses every /api request without it; on loopback nothing changes."""
from __future__ import annotations

import os
import stat
import subprocess
from functools import partial
from pathlib import Path
from typing import Self

import httpx
import pytest

from backend.api_token import is_loopback
from backend.services.ray_head import free_port
from tests.backend.conftest import PY, REPO
from tests.waiting import wait_serving

API = "/api/v1"
# generous: the first run config checked in a server process imports the engine (seconds on a loaded machine)
get = partial(httpx.get, timeout=120)
post = partial(httpx.post, timeout=120)


class Exposed:
    """`python -m backend --host HOST` with its stdout kept (the token notice goes there)."""

    def __init__(self, tmp_path: Path, host: str, env: dict[str, str] | None = None):
        self.data_dir, self.host, self.port = tmp_path / "data", host, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.out = tmp_path / f"server-{self.port}.out"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RLSTUDIO_")}
        self.env.update(RLSTUDIO_DISPATCH="false", RLSTUDIO_FRONTEND_DIR=str(tmp_path / "no-ui"), **(env or {}))
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Self:
        with open(self.out, "wb") as out:
            self.process = subprocess.Popen([PY, "-m", "backend", "--host", self.host, "--port", str(self.port),
                                             "--data-dir", str(self.data_dir), "--log-level", "warning"],
                                            cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        wait_serving(self.url, self.process, 60, self.output)
        return self

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def output(self) -> str:
        return self.out.read_text()

    def run_count(self, token: str) -> int:
        return get(f"{self.url}{API}/runs", headers={"Authorization": f"Bearer {token}"}).json()["count"]


def test_exposed_without_token_generates_one_and_prints_it_once(tmp_path):
    with Exposed(tmp_path, "0.0.0.0") as server:
        token_file = server.data_dir / "api_token"
        token = token_file.read_text().strip()
        assert len(token) >= 32 and stat.S_IMODE(token_file.stat().st_mode) == 0o600
        notice = server.output()
        assert notice.count(token) == 1 and "RLSTUDIO_API_TOKEN" in notice and "/settings" in notice
        # nothing is served without it, and nothing is launched
        assert get(f"{server.url}{API}/runs").status_code == 401
        assert get(f"{server.url}{API}/runs", headers={"Authorization": "Bearer wrong"}).status_code == 403
        refused = post(f"{server.url}{API}/runs",
                             json={"config": {"actor_rollout_ref": {"model": {"trust_remote_code": True}}}})
        assert refused.status_code == 401
        assert server.run_count(token) == 0
        assert post(f"{server.url}{API}/runs", json={"launch": False},
                          headers={"Authorization": f"Bearer {token}"}).status_code == 201
    # a restart on the same data keeps the token (the browser's copy stays valid) and does not print it again
    with Exposed(tmp_path, "0.0.0.0") as again:
        assert again.data_dir == server.data_dir
        assert token not in again.output() and str(token_file.resolve()) in again.output()
        assert get(f"{again.url}{API}/runs").status_code == 401
        assert again.run_count(token) == 1


def test_exposed_with_token_uses_it(tmp_path):
    with Exposed(tmp_path, "0.0.0.0", env={"RLSTUDIO_API_TOKEN": "chosen-by-the-user-0123456789"}) as server:
        assert not (server.data_dir / "api_token").exists()
        assert "chosen-by-the-user" not in server.output() and "generated" not in server.output()
        assert get(f"{server.url}{API}/runs").status_code == 401
        assert server.run_count("chosen-by-the-user-0123456789") == 0


def test_loopback_stays_open_without_token(tmp_path):
    with Exposed(tmp_path, "127.0.0.1") as server:
        assert get(f"{server.url}{API}/runs").status_code == 200
        assert not (server.data_dir / "api_token").exists() and "token" not in server.output()


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                                ("127.0.0.2", True), ("0.0.0.0", False), ("::", False),
                                                ("192.168.1.5", False), ("myhost", False), ("", False)])
def test_which_hosts_count_as_loopback(host, loopback):
    assert is_loopback(host) is loopback
