"""The dispatcher's parts (backend/services/dispatch/), each on its own, on a real database: the queue's order and
limit, the submission's retry policy against real failing submissions (HTTP to a port where nothing listens yet),
the log tail's line numbering, reconcile of a run that never reached Ray, and the replay of a written spool file
into a real server. None starts Ray: tests/backend/test_dispatch.py runs them together on a real head."""
from __future__ import annotations

import asyncio
import http.server
import threading

import httpx
import pytest
import requests
from pydantic import SecretStr
from sqlmodel import Session, select

from backend.models import LogLine, Run, RunStatus
from backend.services.dispatch import queue, records, spool
from backend.services.dispatch.head import RayConnection, cluster_token
from backend.services.dispatch.logs import JobLogs
from backend.services.dispatch.reconcile import reconcile
from backend.services.dispatch.submit import SubmitFailed, job_env, not_ready, with_retries
from backend.services.ray_head import free_port
from engine.loggers.dashboard import Spool
from tests.backend.conftest import HTTP_TIMEOUT
from tests.waiting import wait_for


def create(client, name: str, launch: bool = True) -> int:
    response = client.post("/api/v1/runs", json={"name": name, "overrides": ["trainer.total_training_steps=3"],
                                                 "launch": launch})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def set_status(engine, run_id: int, status: RunStatus, submission_id: str | None = None) -> None:
    with Session(engine) as session:
        run = session.get(Run, run_id)
        run.status, run.submission_id = status, submission_id
        session.add(run)
        session.commit()


def status_of(engine, run_id: int) -> Run:
    with Session(engine, expire_on_commit=False) as session:
        return session.get(Run, run_id)


# ---------------------------------------------------------------------------------------------------- queue
def test_queue_launches_the_oldest_queued_runs_up_to_the_limit(client):
    engine = client.app.state.engine
    first, second, third, fourth = (create(client, f"q{i}") for i in range(4))
    create(client, "by hand", launch=False)  # running, but not the server's: it takes no place
    assert [r.id for r in queue.next_to_launch(engine, 2)] == [first, second]
    set_status(engine, first, RunStatus.running, "job-1")
    set_status(engine, third, RunStatus.starting, "job-3")
    # two of the server's runs in flight: a limit of 3 leaves room for one, the oldest still queued
    assert [r.id for r in queue.next_to_launch(engine, 3)] == [second]
    assert [r.id for r in queue.next_to_launch(engine, 5)] == [second, fourth]
    assert queue.next_to_launch(engine, 2) == []
    set_status(engine, first, RunStatus.succeeded)  # a finished run frees its place
    assert [r.id for r in queue.next_to_launch(engine, 2)] == [second]
    assert [r.id for r in records.in_flight(engine, submitted=True)] == [third]


# ----------------------------------------------------------------------------------------------------- head
def test_a_clusters_token_comes_from_the_setting_then_the_environment_then_the_file(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.ray/auth_token of the machine's
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    assert cluster_token(settings) is None
    (tmp_path / "token").write_text("from-file\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "token"))
    assert cluster_token(settings) == "from-file"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    assert cluster_token(settings) == "from-env"
    assert cluster_token(settings.model_copy(update={"ray_auth_token": SecretStr("from-setting")})) == "from-setting"


def test_a_cluster_is_never_healed(settings):
    """Only a head this server owns is restarted: on a cluster (no head of its own) nothing is lost."""
    lost = []
    connection = RayConnection(settings.model_copy(update={"ray_address": "http://127.0.0.1:1"}))
    assert asyncio.run(connection.heal(lost.append)) is False and lost == []


# --------------------------------------------------------------------------------------------------- submit
class Listener:
    """A real HTTP server on `port`, started when asked (the head comes back): 200 to every POST."""

    def __init__(self, port: int):
        self.port, self.server = port, None

    def start(self) -> None:
        class Ok(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", self.port), Ok)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def port():
    listener = Listener(free_port())
    yield listener
    listener.stop()


def submission(port: int, attempts: list):
    def attempt():
        attempts.append(1)
        requests.post(f"http://127.0.0.1:{port}/api/jobs/", json={}, timeout=30).raise_for_status()
    return attempt


def test_a_refused_submission_is_retried_once_the_head_is_healed(port):
    attempts, heals = [], []

    async def heal():  # the head was dead: a new one comes up (and the retry window starts again)
        heals.append(1)
        port.start()
        return True

    asyncio.run(with_retries(submission(port.port, attempts), heal, run_id=1, pause_s=0))
    assert len(attempts) == 2 and len(heals) == 1


def test_a_submission_still_refused_at_the_deadline_fails_with_the_cause(port):
    attempts, heals = [], []

    async def heal():
        heals.append(1)
        return False

    with pytest.raises(SubmitFailed) as failed:  # no time left to retry in: the first refusal is final
        asyncio.run(with_retries(submission(port.port, attempts), heal, run_id=1, retry_s=0, pause_s=0,
                                 note=lambda: "head.log says why"))
    assert str(failed.value).startswith("Could not submit the Ray job: ") and "refused" in str(failed.value).lower()
    assert str(failed.value).endswith("(local head: head.log says why)")
    assert len(attempts) == 1 and heals == []


def test_a_head_that_cannot_be_healed_fails_the_submission_at_once(port):
    attempts = []

    async def heal():
        raise RuntimeError("ray start exited with 1")

    with pytest.raises(SubmitFailed, match=r"the local Ray head died and a new one did not start \(ray start "
                                           r"exited with 1\)"):
        asyncio.run(with_retries(submission(port.port, attempts), heal, run_id=1, pause_s=0))
    assert len(attempts) == 1


def test_only_transient_errors_are_retried_and_already_exists_is_success(port):
    port.start()
    with pytest.raises(requests.HTTPError) as client_error:  # a real 501: the server does not speak GET
        requests.get(f"http://127.0.0.1:{port.port}/api/jobs/", timeout=30).raise_for_status()
    assert not not_ready(client_error.value)
    assert not_ready(RuntimeError("Request failed with status code 503: No available agent to submit job, "
                                  "please try again later."))
    attempts = []

    def rejected():
        attempts.append(1)
        raise client_error.value

    async def heal():
        raise AssertionError("not a reason to heal")

    with pytest.raises(SubmitFailed, match="501"):  # retry_s is the default 120 s: a retry would show in attempts
        asyncio.run(with_retries(rejected, heal, run_id=1, pause_s=0))
    assert len(attempts) == 1

    def exists():  # an earlier attempt went through after all
        raise RuntimeError("Job with submission_id rlstudio-run-1-ab already exists. Please use a different "
                           "submission_id.")

    asyncio.run(with_retries(exists, heal, run_id=1, pause_s=0))


def test_job_env_takes_the_settings_job_env_and_the_servers_own_keys_win(client, settings):
    engine = client.app.state.engine
    run = status_of(engine, create(client, "env"))
    env = job_env(run, settings.model_copy(update={"job_env": {"HF_HOME": "/hf", "RLSTUDIO_RUN_ID": "99"}}), "tok")
    assert env["HF_HOME"] == "/hf" and env["RLSTUDIO_RUN_ID"] == str(run.id) and env["RLSTUDIO_INGEST_TOKEN"] == "tok"
    assert env["RLSTUDIO_SPOOL_DIR"] == f"{run.run_dir}/spool"


# ----------------------------------------------------------------------------------------------------- logs
def job_lines(engine, run_id: int) -> list[tuple[int, str]]:
    with Session(engine) as session:
        return [(x.seq, x.text) for x in session.exec(select(LogLine).where(
            LogLine.run_id == run_id, LogLine.source == "job").order_by(LogLine.seq)).all()]


async def chunks_of(*chunks: str):
    for chunk in chunks:
        yield chunk


def test_log_tail_stores_each_line_once_as_a_terminal_shows_it(client):
    engine, bus = client.app.state.engine, client.app.state.bus
    run_id = create(client, "logs")
    logs = JobLogs(engine, bus, client=lambda: None)
    # a chunk may end inside a line; a progress bar rewrites its line with carriage returns
    output = ("step 1\nloa", "ding 10%\rloading 100%\r\nstep 2\n", "step 3")
    asyncio.run(logs.store_stream(run_id, chunks_of(*output)))
    expected = [(0, "step 1"), (1, "loading 100%"), (2, "step 2"), (3, "step 3")]
    assert job_lines(engine, run_id) == expected
    # a server that starts again tails the log from its start: the lines it has are not stored again, new ones are
    asyncio.run(logs.store_stream(run_id, chunks_of(*output[:2], "step 3\nstep 4\n")))
    assert job_lines(engine, run_id) == expected + [(4, "step 4")]
    # the job ended: its full log fills in what the tail missed
    asyncio.run(logs.store_missing(run_id, "step 1\nloading 100%\nstep 2\nstep 3\nstep 4\ndone\n"))
    assert job_lines(engine, run_id) == expected + [(4, "step 4"), (5, "done")]


# ------------------------------------------------------------------------------------------------ reconcile
def test_reconcile_makes_a_run_that_never_reached_ray_lost(client):
    engine, bus = client.app.state.engine, client.app.state.bus
    unsent, queued = create(client, "unsent"), create(client, "queued")
    set_status(engine, unsent, RunStatus.starting)  # the server stopped between the record and the submission
    asyncio.run(reconcile(engine, bus, client=None, address="http://127.0.0.1:1", dead=None))
    lost = status_of(engine, unsent)
    assert lost.status == RunStatus.lost and lost.error == "The server stopped before the run was submitted to Ray."
    assert status_of(engine, queued).status == RunStatus.queued


# ---------------------------------------------------------------------------------------------------- spool
@pytest.fixture
def live_server(settings):
    """The app on a real uvicorn server in a thread of this process (the replay sends HTTP): (app, url)."""
    import uvicorn

    from backend.app import create_app

    app, port = create_app(settings), free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), 60, 0.05, "the server to start")
    assert server.started, "the server did not start"
    yield app, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(60)


def test_a_written_spool_is_replayed_into_the_server_under_a_new_token(live_server):
    app, url = live_server
    engine = app.state.engine
    created = httpx.post(f"{url}/api/v1/runs", json={"name": "spooled", "overrides": []}, timeout=HTTP_TIMEOUT)
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    path = spool.spool_file(status_of(engine, run_id).run_dir, run_id)
    Spool(str(path)).append([{"path": f"/api/v1/runs/{run_id}/metrics", "body": {"points": [
        {"key": "critic/score/mean", "step": step, "value": step / 10, "wall_time": 1.0}]}} for step in (1, 2, 3)])
    token_before = status_of(engine, run_id).ingest_token_hash
    assert asyncio.run(spool.replay(engine, run_id, url)) == 3
    assert status_of(engine, run_id).ingest_token_hash not in (None, token_before)
    assert asyncio.run(spool.replay(engine, run_id, url)) is None  # nothing left to send
    series = httpx.get(f"{url}/api/v1/runs/{run_id}/metrics", params={"key": "critic/score/mean"},
                       timeout=HTTP_TIMEOUT).json()
    assert series["data"][0]["steps"] == [1, 2, 3]
    assert not Spool(str(path)).pending()
