"""`python -m backend` as a user starts it: no access log line per request unless --access-log, and the last
thing on the console is where to click."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from backend.services.dispatch.ports import free_port
from tests.waiting import alive, wait_for

REPO = Path(__file__).resolve().parents[2]


# `python -m backend` with SIGINT's default action, as a program run in a terminal has it: a suite launched in the
# background of a script (`cmd &`) passes SIGINT on ignored, and Python then leaves it ignored
BACKEND_AS_IN_A_TERMINAL = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                            "runpy.run_module('backend', run_name='__main__', alter_sys=True)")


def serve(tmp_path: Path, *flags: str):
    port = free_port()
    out = tmp_path / f"console-{port}.txt"
    env = {k: v for k, v in os.environ.items() if k != "RLSTUDIO_API_TOKEN"}
    env.update({"RLSTUDIO_DISPATCH": "false", "RLSTUDIO_FRONTEND_DIR": str(tmp_path / "no-ui")})
    with open(out, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", BACKEND_AS_IN_A_TERMINAL, "--port", str(port), "--data-dir",
                                 str(tmp_path / "data"), *flags], cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def banner() -> bool:
        alive(proc, out.read_text)
        return "rlstudio is up" in out.read_text()

    try:
        wait_for(banner, 120, 0.2, "the banner", out.read_text)
    except AssertionError as never:
        proc.kill()
        pytest.fail(str(never))
    return proc, url, out


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_quiet_console_ends_with_where_to_click(tmp_path):
    proc, url, out = serve(tmp_path)
    try:
        run = httpx.post(url + "/api/v1/runs", json={"name": "quiet", "preset": "demo", "launch": False}).json()
        for step in range(5):  # what a training run does several times a second
            r = httpx.post(f"{url}/api/v1/runs/{run['id']}/metrics", headers={"Authorization": f"Bearer {run['ingest_token']}"},
                           json={"points": [{"key": "critic/score/mean", "step": step, "value": 0.5}]})
            assert r.status_code == 200, r.text
        httpx.get(url + "/healthz")
        time.sleep(0.5)
        text = out.read_text()
    finally:
        stop(proc)
    lines = [line for line in text.splitlines() if line.strip()]
    assert not [line for line in lines if "/metrics" in line or "/healthz" in line or "HTTP/1.1" in line], text
    assert lines[-2] == f"rlstudio is up: open {url}/", text
    assert lines[-1].startswith(f"  API docs {url}/docs"), text


def test_access_log_flag_turns_them_on(tmp_path):
    proc, url, out = serve(tmp_path, "--access-log")
    try:
        httpx.get(url + "/healthz")
        wait_for(lambda: "GET /healthz" in out.read_text(), 30, 0.2, "the access log line", out.read_text)
        text = out.read_text()
    finally:
        stop(proc)
    assert "GET /healthz HTTP/1.1" in text, text


def test_ray_job_client_info_lines_stay_off_the_console():
    """Ray's job client logs INFO lines on Ray's console handler ("WebSocket closed for job ..." when a run's log
    tail ends); the server keeps its warnings only, and its own lines."""
    code = ("import logging\n"
            "from backend.services.dispatch import quiet_ray_job_client\n"
            "from ray.job_submission import JobSubmissionClient\n"
            "quiet_ray_job_client()\n"
            "sdk = logging.getLogger('ray.dashboard.modules.job.sdk')\n"
            "sdk.info('WebSocket closed for job rlstudio-run-1 with close code 1000')\n"
            "sdk.warning('a warning of the job client')\n"
            "own = logging.getLogger('rlstudio.dispatch')\n"
            "own.addHandler(logging.StreamHandler()); own.setLevel(logging.INFO)\n"
            "own.info('an own line')\n")
    result = subprocess.run([sys.executable, "-c", code], check=False, cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "WebSocket closed" not in result.stderr, result.stderr
    assert "a warning of the job client" in result.stderr and "an own line" in result.stderr, result.stderr


def test_ctrl_c_stops_quietly(tmp_path):
    """Ctrl-C (SIGINT) shuts the server down cleanly and prints no KeyboardInterrupt traceback after "Application
    shutdown complete" (issue 35); the exit status is a shell's for an interrupted program (130)."""
    proc, _url, out = serve(tmp_path)
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=60)  # a hang guard
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the server did not stop on SIGINT: {out.read_text()[-2000:]}")
    text = out.read_text()
    assert "Application shutdown complete" in text, text[-2000:]
    after = text.split("Application shutdown complete", 1)[1]
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, after
    assert code == 130, (code, text[-2000:])
