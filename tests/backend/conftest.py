"""Shared fixtures: an app on a real SQLite file, a real uvicorn server subprocess, one real Ray head."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from backend.services.ray_head import free_port
from backend.settings import Settings
from tests import waiting
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
# Ray drains a node for up to 30 s on SIGTERM (for Serve); the heads these tests start (in-process and in server
# subprocesses, which inherit this environment) have nothing to drain, so they stop at once (35 s -> 1.6 s).
os.environ.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
PY = sys.executable


@pytest.fixture(scope="session")
def migrated_db(tmp_path_factory) -> Path:
    """One SQLite file migrated to head, copied into each test's data dir: the app's start still runs
    `alembic upgrade head` (a no-op there) and each test still has its own real file, but the ~40 schema
    statements, each a disk sync, run once per session instead of once per test. That the server's start
    migrates an empty database is tests/backend/test_migrations.py's."""
    from backend import db

    path = tmp_path_factory.mktemp("migrated") / "rlstudio.db"
    db.upgrade(f"sqlite:///{path}")
    assert not path.with_name(path.name + "-wal").exists()  # the whole schema is in the one file
    return path


@pytest.fixture(scope="session")
def postgres():
    """This worker's PostgreSQL server (tests/backend/postgres.py), started on first use, stopped at the session's
    end; its `migrated` database is the template each test's database is copied from. Skips with the reason where
    PostgreSQL or its driver is not installed."""
    from tests.backend.postgres import PostgresServer, unavailable

    reason = unavailable()
    if reason:
        pytest.skip(reason)
    server = PostgresServer().start()
    try:
        from backend import db

        url = server.create_database()
        db.upgrade(url)
        server.migrated = url.rsplit("/", 1)[1]
        yield server
    finally:
        server.stop()


# The backends a database test runs on: `@pytest.mark.parametrize("database", DATABASES, indirect=True)`.
DATABASES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)]


@pytest.fixture
def database(request) -> str | None:
    """The SQLAlchemy URL of the test's database: None (the default) for the SQLite file in the data dir; with
    the parameter "postgresql", a fresh database on this worker's PostgreSQL server (migrated to head, or empty
    with "postgresql-empty"), dropped after the test. `settings` and `server_factory` use it. A test that does not
    choose gets RLSTUDIO_TEST_DATABASE (default sqlite): `=postgresql` runs those on PostgreSQL as well."""
    kind = getattr(request, "param", os.environ.get("RLSTUDIO_TEST_DATABASE", "sqlite"))
    if kind == "sqlite":
        yield None
        return
    server = request.getfixturevalue("postgres")
    url = server.create_database(template=None if kind == "postgresql-empty" else server.migrated)
    yield url
    server.drop_database(url)


@pytest.fixture
def settings(tmp_path, request, database) -> Settings:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    if database is None:
        shutil.copyfile(request.getfixturevalue("migrated_db"), data_dir / "rlstudio.db")
    return Settings(data_dir=data_dir, dispatch=False, frontend_dir=tmp_path / "no-ui", database_url=database)


@pytest.fixture
def client(settings):
    with TestClient(create_app(settings)) as c:
        yield c


def auth(run: dict) -> dict:
    """The header that carries a run's ingest token, as the engine's dashboard logger sends it."""
    return {"Authorization": f"Bearer {run['ingest_token']}"}


def external_run(client, **extra) -> dict:
    """A run recorded without launching (as the dashboard logger creates for a run started by hand)."""
    body = {"name": "r", "overrides": ["trainer.total_training_steps=3"], "launch": False, **extra}
    response = client.post("/api/v1/runs", json=body)
    assert response.status_code == 201, response.text
    return response.json()


# A request's own timeout guards against a hung server, not a slow one: on a busy 2-core machine a Ray head
# starting beside the suite can keep an answer waiting for several seconds.
HTTP_TIMEOUT = 60.0


class Server:
    """`python -m backend` in a subprocess (real uvicorn), on a free port."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None, port: int | None = None):
        self.data_dir = data_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RLSTUDIO_")}
        # rlstudio's own info lines (dispatch: submitted, pending on Ray) in the log a failed test prints
        self.env.update(RLSTUDIO_FRONTEND_DIR=str(data_dir / "no-ui"), RLSTUDIO_LOG_LEVEL="INFO", **(env or {}))
        self.process: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"server-{self.port}.log"

    def start(self, timeout: float = 120.0) -> Server:  # generous: a loaded machine imports slowly
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([PY, "-m", "backend", "--port", str(self.port), "--data-dir",
                                             str(self.data_dir), "--log-level", "warning"], cwd=REPO, env=self.env,
                                            stdout=log, stderr=subprocess.STDOUT)
        waiting.wait_serving(self.url, self.process, timeout, lambda: self.log_path.read_text()[-3000:])
        return self

    def wait_dispatch_ready(self, timeout: float = 120.0) -> None:
        waiting.wait_dispatch_ready(self.url, timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)

    def print_logs(self, chars: int = 6000) -> None:
        for path in (self.log_path, self.data_dir / "ray" / "head.log"):
            if path.exists():
                print(f"----- {path} (last {chars} characters)\n{path.read_text(errors='replace')[-chars:]}")


@pytest.fixture
def server_factory(tmp_path, request, database):
    """Servers on the test's database (`database`: the SQLite file of each server's data dir by default)."""
    servers: list[Server] = []
    on_database = {} if database is None else {"RLSTUDIO_DATABASE_URL": database}

    def make(data_dir: Path | None = None, env: dict[str, str] | None = None, port: int | None = None) -> Server:
        server = Server(data_dir or tmp_path / "data", env={"RLSTUDIO_DISPATCH": "false", **on_database, **(env or {})},
                        port=port)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:  # what the servers and their Ray heads said, in the failure report
        for server in servers:
            server.print_logs()


TERMINAL = {"succeeded", "failed", "lost", "cancelled"}


def run_state(url: str, run_id: int) -> dict:
    return httpx.get(f"{url}/api/v1/runs/{run_id}", timeout=HTTP_TIMEOUT).json()


def wait_status(url: str, run_id: int, statuses: set[str], timeout: float = 600.0, interval: float = 0.3) -> dict:
    """The run's record once its status is one of `statuses` (the timeout is a hang guard). A run that ends in
    another status can never get there: that fails at once, with its error and log tail."""
    def reached():
        record = run_state(url, run_id)
        if record["status"] in statuses:
            return record
        if record["status"] in TERMINAL:
            raise AssertionError(f"run {run_id} ended `{record['status']}` while the test waited for {statuses}: "
                                 f"error={record.get('error')!r}; log tail: {(record.get('log_tail') or '')[-2000:]}")
        return None

    return wait_for(reached, timeout, interval, f"run {run_id} -> {statuses}")


class SSEReader:
    """Reads a server-sent-event stream in a thread: events (id, event, data, arrival time) in a list."""

    def __init__(self, url: str, headers: dict[str, str] | None = None):
        import threading

        self.url, self.headers = url, headers or {}
        self.events: list[dict] = []
        self.status: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        import json

        event: dict = {}
        with httpx.Client(timeout=httpx.Timeout(5, read=None)) as http, \
                http.stream("GET", self.url, headers=self.headers) as response:
            self.status = response.status_code
            for line in response.iter_lines():
                if self._stop.is_set():
                    return
                if not line:
                    if "data" in event:
                        event["data"] = json.loads(event["data"])
                        event["at"] = time.time()
                        self.events.append(event)
                    event = {}
                elif line.startswith(":"):
                    continue
                else:
                    field, _, value = line.partition(":")
                    event[field] = value.removeprefix(" ")

    def wait(self, predicate, timeout: float = 120.0):  # a hang guard: events arrive when they arrive
        return wait_for(lambda: [e for e in self.events if predicate(e)], timeout, 0.02, "SSE events")

    def close(self) -> None:
        self._stop.set()


def pytest_configure(config):
    config.addinivalue_line("markers", "postgresql: runs on the PostgreSQL server the tests start "
                                       "(tests/backend/postgres.py); skipped with the reason where it is not installed")
