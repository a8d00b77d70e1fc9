"""UI tests: a real backend (uvicorn subprocess on 127.0.0.1 with a temporary data dir) serving the built
frontend, driven by Debian's Chromium through the Python playwright package. Screenshots go to
test-artifacts/ui/."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.step_hold import hold_env
from tests.ui.seed import Api
from tests.waiting import wait_dispatch_ready, wait_serving

# Every wait in these tests is for a state (an element, a URL); its timeout is only a hang guard. On a shared
# 2-core machine (the suite's other workers, a Ray head starting) a page can take far longer than Playwright's
# defaults (5 s for expect, 30 s for actions) to settle: it failed once at load average 19 with 15 s.
from playwright.sync_api import expect  # noqa: E402

HANG_GUARD_MS = 90_000
expect.set_options(timeout=HANG_GUARD_MS)

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "ui"
CHROMIUM = os.environ.get("RLSTUDIO_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
                 "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, data_dir: Path, *, dispatch: bool, extra_env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir
        env = {k: v for k, v in os.environ.items() if k != "RLSTUDIO_API_TOKEN"}  # no token unless asked
        env.update({"RLSTUDIO_DISPATCH": "true" if dispatch else "false", **(extra_env or {})})
        self.log = open(data_dir / "server.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "backend", "--port", str(self.port), "--data-dir", str(data_dir), "--log-level", "warning"],
            cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        wait_serving(self.url, self.proc, 120, lambda: (data_dir / "server.log").read_text()[-2000:])
        self.api = Api(self.url, token=(extra_env or {}).get("RLSTUDIO_API_TOKEN"))

    def diagnostics(self, lines: int = 40) -> str:
        """The tails of the server's log and of its Ray head's, for a failure message."""
        out = []
        for path in (self.data_dir / "server.log", self.data_dir / "ray" / "head.log"):
            try:
                tail = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            out.append(f"--- {path.name} (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(out)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def _skip_or_fail(reason: str) -> None:
    # The README's test command sets RLSTUDIO_REQUIRE_UI=1: there a missing UI or browser is a failure.
    if os.environ.get("RLSTUDIO_REQUIRE_UI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def built_frontend() -> Path:
    dist = REPO / "frontend" / "dist"
    if not (dist / "index.html").is_file():
        _skip_or_fail("frontend not built: run scripts/setup_frontend.sh (or npm run build -w frontend)")
    return dist


@pytest.fixture(scope="session")
def server(tmp_path_factory, built_frontend) -> Server:
    """A server without Ray dispatch: runs are fed through the ingest API."""
    srv = Server(tmp_path_factory.mktemp("rlstudio-ui"), dispatch=False)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def dispatch_server(tmp_path_factory, built_frontend) -> Server:
    """A server with real Ray dispatch (it starts its own local Ray head), shared by the UI tests that train:
    one server and one head for all of them. Its jobs get the tests' step gate on `srv.hold` (tests/step_hold.py), so
    that a test can hold a run at a checkpoint; a test that creates a hold file removes it before it ends."""
    hold = tmp_path_factory.mktemp("hold")
    env = {"RLSTUDIO_MAX_CONCURRENT_RUNS": "1", "RLSTUDIO_POLL_INTERVAL_S": "0.3", **hold_env(hold),
           "RLSTUDIO_RAY_NUM_CPUS": "2", "OMP_WAIT_POLICY": "PASSIVE"}
    if os.environ.get("RLSTUDIO_UI_JOB_MODULE"):  # e.g. tests.backend.jobs.tiny_trainer for a fast check
        env["RLSTUDIO_JOB_MODULE"] = os.environ["RLSTUDIO_UI_JOB_MODULE"]
    srv = Server(tmp_path_factory.mktemp("rlstudio-ui-dispatch"), dispatch=True, extra_env=env)
    srv.hold = hold
    wait_dispatch_ready(srv.url, 300, srv.diagnostics)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        _skip_or_fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1400, "height": 900}, color_scheme="light")
    context.set_default_timeout(HANG_GUARD_MS)
    context.set_default_navigation_timeout(HANG_GUARD_MS)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors  # type: ignore[attr-defined]
    yield pg
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:  # what the page showed when the test failed
        try:
            print(f"page at failure: {pg.url} -> {shot(pg, 'failed-' + request.node.name)}")
        except Exception as exc:  # noqa: BLE001 - a closed or crashed page: the report has the rest
            print(f"no screenshot of the failed page: {exc}")
    context.close()


def shot(page, name: str, full_page: bool = True) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


@pytest.fixture(scope="session", autouse=True)
def _clean_artifacts():
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
