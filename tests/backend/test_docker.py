"""Docker files can't be built here: lint them with hadolint and validate compose.yaml against the
Compose specification's JSON Schema (vendored in check-jsonschema), plus the wiring the issue asks for."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.backend.conftest import REPO

DOCKER = REPO / "docker"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    assert found, f"{name} is not installed (pip install -e '.[dev]')"
    return found


def test_dockerfiles_pass_hadolint():
    files = [str(DOCKER / "server.Dockerfile"), str(DOCKER / "worker.Dockerfile")]
    result = subprocess.run([tool("hadolint"), "--config", str(DOCKER / ".hadolint.yaml"), "--no-color", *files],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "", result.stdout  # not even info-level findings


def test_compose_matches_the_compose_spec():
    env = dict(os.environ, RAY_AUTH_TOKEN="x")
    result = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                             str(DOCKER / "compose.yaml")], capture_output=True, text=True, timeout=120, env=env,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_wiring():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"ray-head", "gpu-worker", "server"}
    assert "--head" in services["ray-head"]["command"]
    gpu = services["gpu-worker"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and "gpu" in gpu["capabilities"]
    assert services["gpu-worker"]["environment"]["RAY_HEAD_ADDRESS"].startswith("ray-head:")
    server_env = services["server"]["environment"]
    assert server_env["RLSTUDIO_RAY_ADDRESS"].startswith("http://ray-head:")
    assert any(v.endswith(":/data") for v in services["server"]["volumes"]) and "rlstudio-data" in compose["volumes"]
    assert services["server"]["ports"] == ["127.0.0.1:8000:8000"]


def test_server_image_is_multistage_node_then_python():
    text = (DOCKER / "server.Dockerfile").read_text()
    stages = [line.split()[1] for line in text.splitlines() if line.startswith("FROM ")]
    assert stages[0].startswith("node:") and stages[-1].startswith("python:")
    assert "COPY --from=ui" in text
    assert (DOCKER / "worker.Dockerfile").read_text().startswith("# rlstudio GPU worker")
    assert "nvidia/cuda" in (DOCKER / "worker.Dockerfile").read_text() and '".[vllm]"' in (
        DOCKER / "worker.Dockerfile").read_text()
