"""Crashes on the real stack (the server as a subprocess with its own Ray head, the real engine running the
demo preset for a few steps): `kill -9` of the server loses nothing and leaves nothing behind; `kill -9` of
a Ray worker fails the run with the cause and frees its resources. Runs stop at known steps through the
tests' step gate on the trainer's after-step hook (tests/step_hold.py), so no test races a running job. The
server's kill -9 and re-attach also on PostgreSQL (tests/backend/postgres.py)."""
from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from backend.services.dispatch.local_head import LocalRayHead
from backend.services.dispatch.processes import process_start_time
from tests.backend.conftest import DATABASES, HTTP_TIMEOUT, REPO, TERMINAL, run_state, wait_for, wait_status
from tests.step_hold import hold_env

pytestmark = [pytest.mark.ray, pytest.mark.slow,
              pytest.mark.skipif(not (REPO / "engine" / "models" / "tiny_assets").is_dir(),
                                 reason="the engine's built-in tiny model is not shipped (engine/models/tiny_assets)")]


def server_env(hold: Path, **extra) -> dict[str, str]:
    return {"RLSTUDIO_DISPATCH": "true", "RLSTUDIO_RAY_NUM_CPUS": "2", "RLSTUDIO_JOB_WORKDIR": str(REPO),
            "RLSTUDIO_POLL_INTERVAL_S": "0.3", "RLSTUDIO_MAX_CONCURRENT_RUNS": "1", "OMP_WAIT_POLICY": "PASSIVE",
            **hold_env(hold), **extra}


def held_server(server_factory, tmp_path: Path, *steps: int):
    """A dispatching server on a fresh data dir whose runs will hold after each of `steps` (until the test
    removes the step's file): returns (server, hold dir, data dir)."""
    hold, data = tmp_path / "hold", tmp_path / "data"
    hold.mkdir()
    for step in steps:
        (hold / f"step-{step}").touch()
    server = server_factory(data_dir=data, env=server_env(hold)).start()
    server.wait_dispatch_ready(300)
    return server, hold, data


def launch_demo(url: str, steps: int, name: str) -> dict:
    created = httpx.post(f"{url}/api/v1/runs", json={"preset": "demo", "name": name, "overrides": [
        f"trainer.total_training_steps={steps}", "trainer.test_freq=-1", "trainer.val_before_train=false"]},
        timeout=60)
    assert created.status_code == 201, created.text
    return created.json()


def wait_held(hold: Path, step: int, url: str | None = None, run_id: int | None = None, timeout: float = 600) -> None:
    """Until the run holds after `step`. With the server's url, a run that has ended cannot get there: that fails
    at once with its status and error (a head that died under it, say) instead of at the hang guard."""
    def held():
        if (hold / f"held-{step}").exists():
            return True
        if url is not None and (record := run_state(url, run_id))["status"] in TERMINAL:
            raise AssertionError(f"run {run_id} ended `{record['status']}` before holding after step {step}: "
                                 f"{record.get('error')!r}")
        return False

    wait_for(held, timeout, 0.2, f"the run to hold after step {step}")


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every live process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        out[int(entry.name)] = (ppid, cmdline)
    return out


def descendants(root: int) -> dict[int, int]:
    """Every process under `root` (inclusive) -> its start time: the head's Ray processes, the job's
    supervisor and driver, the engine's workers."""
    table = processes()
    found, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in table.items():
            if ppid == parent and pid not in found:
                found.add(pid)
                frontier.append(pid)
    return {pid: start for pid in found if (start := process_start_time(pid)) is not None}


def still_alive(pids: dict[int, int]) -> list[int]:
    return [pid for pid, start in pids.items() if process_start_time(pid) == start]


def file_logger_rows(run_dir: Path) -> tuple[dict[tuple[str, int], float | None], list[tuple]]:
    points: dict[tuple[str, int], float | None] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        entry = json.loads(line)
        for key, value in entry["data"].items():
            if isinstance(value, (int, float)) or value is None:
                points[(key, entry["step"])] = None if value is None else float(value)
    samples = sorted((s["split"], s["step"], s.get("prompt_index"), s["prompt"], s["response"])
                     for s in map(json.loads, (run_dir / "samples.jsonl").read_text().splitlines()))
    return points, samples


def database_rows(url: str, run_id: int) -> tuple[list[tuple], list[tuple]]:
    engine = create_engine(url)
    try:
        with engine.connect() as con:
            points = con.execute(text('SELECT "key", step, value FROM metric_point WHERE run_id = :r'),
                                 {"r": run_id}).all()
            samples = con.execute(text("SELECT split, step, prompt_index, prompt, response FROM sample "
                                       "WHERE run_id = :r"), {"r": run_id}).all()
    finally:
        engine.dispose()
    return [tuple(p) for p in points], sorted(tuple(s) for s in samples)


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_kill9_server_mid_run_reattaches_and_loses_nothing(server_factory, tmp_path, database):
    """kill -9 the server while the run is held after step 2; the run goes on to step 4 while no server
    is up (its dashboard logger spools); a new server on the same data dir re-attaches to the same Ray
    head, the run stays `running` and then succeeds, with every point and sample of its file logger in the
    database exactly once; the second server's shutdown leaves no Ray process of the first behind."""
    server, hold, data = held_server(server_factory, tmp_path, 2, 4)
    run = launch_demo(server.url, 6, "kill9")
    wait_held(hold, 2, server.url, run["id"])
    assert run_state(server.url, run["id"])["status"] == "running"
    head = LocalRayHead(data).read_record()
    assert head is not None
    first_server_processes = descendants(head.pid)
    assert len(first_server_processes) > 3, first_server_processes  # head, its Ray processes, the job

    server.kill9()
    (hold / "step-2").unlink()  # steps 3 and 4 train with no server to send to
    wait_held(hold, 4)

    server.start()
    server.wait_dispatch_ready(300)
    assert "re-attached" in httpx.get(f"{server.url}/healthz", timeout=HTTP_TIMEOUT).json()["dispatch"]
    assert LocalRayHead(data).read_record() == head  # the same head, not a second one
    assert run_state(server.url, run["id"])["status"] == "running"  # not `lost`
    (hold / "step-4").unlink()
    done = wait_status(server.url, run["id"], TERMINAL)
    assert done["status"] == "succeeded", (done["error"], done["log_tail"])
    assert done["progress_step"] == 6

    points, samples = file_logger_rows(data / "runs" / str(run["id"]) / "checkpoints")
    assert {step for _, step in points} == set(range(1, 7)) and len(samples) == 6 * 32 * 8
    url = database or f"sqlite:///{data / 'rlstudio.db'}"
    stored = wait_for(lambda: (rows := database_rows(url, run["id"]))[0]
                      and len(rows[0]) >= len(points) and len(rows[1]) >= len(samples) and rows, 60, 0.5,
                      "every point and sample in the database")
    stored_points, stored_samples = stored
    assert len(stored_points) == len(points)  # none lost, none twice
    for key, step, value in stored_points:
        expected = points[(key, step)]
        assert expected is None and value is None or math.isclose(value, expected, rel_tol=1e-12), (key, step)
    assert stored_samples == samples

    server.stop()  # the second server stops the head it adopted, with everything the first one started
    wait_for(lambda: not still_alive(first_server_processes), 120, 0.5, "the first server's Ray processes to end")
    assert LocalRayHead(data).read_record() is None


def test_kill9_server_and_its_head_makes_the_run_lost_with_the_reason(server_factory, tmp_path):
    server, hold, data = held_server(server_factory, tmp_path, 1)
    run = launch_demo(server.url, 3, "head-dies")
    wait_held(hold, 1, server.url, run["id"])
    head = LocalRayHead(data).read_record()
    doomed = descendants(head.pid)
    server.kill9()
    os.killpg(head.pid, signal.SIGKILL)  # the head dies as well (the machine rebooted, the OOM killer...)
    (hold / "step-1").unlink()
    wait_for(lambda: not still_alive(doomed), 120, 0.5, "the dead head's processes to end")

    server.start()
    server.wait_dispatch_ready(300)
    lost = run_state(server.url, run["id"])
    assert lost["status"] == "lost", lost
    assert f"local Ray head (pid {head.pid}" in lost["error"] and "had died" in lost["error"], lost["error"]


def raylet_workers(head_pid: int, title: str) -> list[int]:
    """The head's worker processes whose title (Ray sets it to `ray::<Class>...`) starts with `title`."""
    table = processes()
    under = descendants(head_pid)
    return [pid for pid in under if table.get(pid, (0, ""))[1].startswith(title)]


def test_kill9_worker_fails_the_run_with_the_cause_and_frees_its_resources(server_factory, tmp_path):
    server, hold, data = held_server(server_factory, tmp_path, 1)
    victim = launch_demo(server.url, 3, "worker-dies")
    queued = launch_demo(server.url, 2, "next")  # the limit is one run: it waits for the victim's resources
    wait_held(hold, 1, server.url, victim["id"])
    head = LocalRayHead(data).read_record()
    workers = raylet_workers(head.pid, "ray::TrainWorker")
    assert len(workers) == 1, workers  # the demo trains on one worker
    os.kill(workers[0], signal.SIGKILL)
    (hold / "step-1").unlink()  # the driver's next call reaches the dead worker
    failed = wait_status(server.url, victim["id"], TERMINAL)
    assert failed["status"] == "failed", failed
    assert "ActorDiedError" in failed["error"] or "died" in failed["error"].lower(), failed["error"]
    assert run_state(server.url, queued["id"])["status"] in ("queued", "starting", "running")
    done = wait_status(server.url, queued["id"], TERMINAL)
    assert done["status"] == "succeeded", (done["error"], done["log_tail"])


def test_head_dies_under_a_live_server_run_lost_and_a_new_head_takes_the_next(server_factory, tmp_path):
    """The server's own head dies while the server runs (the OOM killer, a Ray component that crashed): the
    run in flight is `lost` with the reason, the server starts a new head, and the next run succeeds on it."""
    server, hold, data = held_server(server_factory, tmp_path, 1)
    run = launch_demo(server.url, 3, "head-dies-live")
    wait_held(hold, 1, server.url, run["id"])
    head = LocalRayHead(data).read_record()
    os.killpg(head.pid, signal.SIGKILL)
    lost = wait_status(server.url, run["id"], TERMINAL)
    assert lost["status"] == "lost", lost
    assert "local Ray head" in lost["error"] and "died while the run was in flight" in lost["error"], lost["error"]
    (hold / "step-1").unlink()
    after = launch_demo(server.url, 1, "on-the-new-head")
    done = wait_status(server.url, after["id"], TERMINAL)
    assert done["status"] == "succeeded", (done["error"], done["log_tail"])
    new_head = LocalRayHead(data).read_record()
    assert new_head is not None and new_head.pid != head.pid and new_head.alive()
