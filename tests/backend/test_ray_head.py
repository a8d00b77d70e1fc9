"""The server's own Ray head: ports that never repeat, one retry with new ports when `ray start` fails, and
re-attaching to (or cleaning up after) the head an earlier server left on the same data dir."""
from __future__ import annotations

import logging
import os
import signal
import socket
import tempfile
from pathlib import Path

import pytest

from backend.services import ray_head
from backend.services.ray_head import PORT_FLAGS, LocalRayHead, free_ports, process_group_members


def test_free_ports_are_distinct_and_never_handed_out_twice():
    first = free_ports(len(PORT_FLAGS))
    assert len(set(first)) == len(first) == len(PORT_FLAGS)
    later = [p for _ in range(20) for p in free_ports(len(PORT_FLAGS))]
    assert len(set(later)) == len(later)  # the OS may offer a port again; the allocator never does
    assert not set(first) & set(later)
    for port in first + later:  # and each was free when handed out
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_free_ports_lie_below_the_ephemeral_range():
    """The kernel hands out ephemeral ports on its own (outgoing connections, binds to port 0, Ray's workers):
    a port chosen there could be taken before the head's component binds it. Ours never are."""
    low = ray_head.ephemeral_range()[0]
    assert low - ray_head.LOWEST_PORT >= 1000  # this machine's range leaves room below it
    ports = free_ports(50)
    assert all(ray_head.LOWEST_PORT <= p < low for p in ports), ports


def test_free_ports_skips_a_port_drawn_again_or_in_use(monkeypatch):
    """A port drawn twice, one handed out before and one something listens on are each skipped."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        in_use = busy.getsockname()[1]
        low = ray_head.ephemeral_range()[0]
        a, b, c, d = low - 10, low - 11, low - 12, low - 13
        monkeypatch.setattr(ray_head, "_handed_out", {b})
        monkeypatch.setattr(ray_head, "_candidates", lambda: iter([a, a, b, in_use, c, d]))
        assert free_ports(2) == [a, c]


class DuplicatePortsOnce(LocalRayHead):
    """The first start gets the GCS port twice, as the old one-port-at-a-time allocator could give it."""

    calls = 0

    def _choose_ports(self) -> list[int]:
        ports = super()._choose_ports()
        DuplicatePortsOnce.calls += 1
        if DuplicatePortsOnce.calls == 1:
            ports[PORT_FLAGS.index("--ray-client-server-port")] = ports[PORT_FLAGS.index("--port")]
        return ports


@pytest.mark.ray
@pytest.mark.slow  # starts its own Ray head
def test_failed_head_start_is_retried_once_with_new_ports(tmp_path, caplog):
    head = DuplicatePortsOnce(tmp_path / "data", num_cpus=1)
    with caplog.at_level(logging.WARNING, logger="rlstudio.ray_head"):
        address = head.start()
    try:
        assert DuplicatePortsOnce.calls == 2
        assert head._jobs_api_up(address)
        warning = [r.getMessage() for r in caplog.records if "retrying once with new ports" in r.getMessage()]
        assert warning and "used by other components" in warning[0], caplog.text
        assert "retrying once with new ports" in head.log_path.read_text()
        assert head.read_record().address == address
    finally:
        head.stop()
    assert head.read_record() is None


@pytest.mark.ray
@pytest.mark.slow
def test_next_server_reattaches_to_a_live_head_and_replaces_a_dead_one(tmp_path):
    data = tmp_path / "data"
    first = LocalRayHead(data, num_cpus=1)
    address = first.start()
    record = first.record
    assert process_group_members(record.pid)
    second = LocalRayHead(data, num_cpus=1)  # as a new server on the same data dir would
    assert second.start() == address and second.attached and second.previous is None

    os.killpg(record.pid, signal.SIGKILL)  # now the head dies too (e.g. the OOM killer), not just the server
    first.process.wait(10)  # reap our child (the first "server" is this test process)
    third = LocalRayHead(data, num_cpus=1)
    try:
        third.start()
        assert not third.attached and third.previous == record
        assert third.record.pid != record.pid and third._jobs_api_up(third.address)
        assert third.read_record() == third.record
        # a head adopted from an earlier server is not our child: stop() signals the recorded pid, then
        # kills what is left of its process group
        fourth = LocalRayHead(data, num_cpus=1)
        assert fourth.attach() and fourth.record == third.record
        fourth.stop()
        assert process_group_members(third.record.pid) == []
        assert fourth.read_record() is None
    finally:
        third.stop()


class NeverReady(LocalRayHead):
    """A head whose job API never answers: its start is still waiting for it when the test closes the head."""

    def _jobs_api_up(self, address: str) -> bool:
        return False


@pytest.mark.ray
def test_a_server_shut_down_mid_start_leaves_no_head(tmp_path):
    """The server's shutdown (close) overtakes a start running in the dispatcher's thread: the head launched is
    stopped, with its process group, and the start ends with HeadClosed; after close a start launches nothing."""
    import threading

    from tests.waiting import wait_for

    head = NeverReady(tmp_path / "data", num_cpus=1)  # still starting whenever close() comes: no race
    ended: list[BaseException | str] = []

    def start():
        try:
            ended.append(head.start())
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            ended.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    wait_for(lambda: head.process is not None, 60, 0.01, "`ray start --head` to be launched")
    pid = head.process.pid
    head.close()
    thread.join(60)
    assert not thread.is_alive()
    assert len(ended) == 1 and isinstance(ended[0], ray_head.HeadClosed), ended
    wait_for(lambda: process_group_members(pid) == [], 30, 0.1, "the head's process group to be gone")
    assert head.read_record() is None

    with pytest.raises(ray_head.HeadClosed, match="shutting down"):
        head.start()
    assert head.process is None
    assert not head.temp_dir.is_symlink() or head.temp_dir == head.session_root  # no /tmp link left behind


# ------------------------------------------------------------------------------------------------- loopback only
def listening_beyond_loopback(root_pid: int) -> tuple[list[str], int]:
    """Every socket of `root_pid`'s process tree that listens (TCP) or is bound (UDP) on an address other than
    loopback, described; and how many listening sockets the tree has in all."""
    import psutil

    root = psutil.Process(root_pid)
    beyond, total = [], 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            name, connections = proc.name(), proc.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        for c in connections:
            if c.status != psutil.CONN_LISTEN and not (c.type == socket.SOCK_DGRAM and c.laddr):
                continue
            total += 1
            if not ray_head.is_loopback(c.laddr.ip):
                beyond.append(f"pid {proc.pid} ({name}): {c.laddr.ip} port {c.laddr.port}")
    return beyond, total


def test_loopback_addresses():
    for host in ("127.0.0.1", "127.0.1.1", "::1", "::ffff:127.0.0.1", "localhost"):
        assert ray_head.is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.0.2.2", "::ffff:192.0.2.2", "10.1.2.3", "fe80::1%eth0", "example.org"):
        assert not ray_head.is_loopback(host), host


def test_the_head_is_told_to_stay_on_loopback_unless_another_address_is_chosen(tmp_path):
    """Loopback (the default): Ray's single-machine switch is on, the node's address 127.0.0.1. Another address:
    the switch is off (other nodes may join), token auth on either way, the job API on 127.0.0.1 either way."""
    local = LocalRayHead(tmp_path / "a")
    assert local.loopback and local.env()[ray_head.LOOPBACK_ONLY_ENV] == "0"
    assert local.env()["RAY_AUTH_MODE"] == "token"
    wide = LocalRayHead(tmp_path / "b", host="192.0.2.2")
    assert not wide.loopback and wide.env()[ray_head.LOOPBACK_ONLY_ENV] == "1"
    assert wide.env()["RAY_AUTH_MODE"] == "token" and wide._gcs_host() == "192.0.2.2"
    assert LocalRayHead(tmp_path / "c", host="::1")._gcs_host() == "[::1]"


def test_a_wider_head_host_is_an_explicit_address(monkeypatch):
    from pydantic import ValidationError

    from backend.settings import Settings

    assert Settings().ray_head_host == "127.0.0.1"
    monkeypatch.setenv("RLSTUDIO_RAY_HEAD_HOST", "192.0.2.2")
    assert Settings().ray_head_host == "192.0.2.2"
    for bad in ("0.0.0.0", "::", "my-laptop"):
        monkeypatch.setenv("RLSTUDIO_RAY_HEAD_HOST", bad)
        with pytest.raises(ValidationError, match="RLSTUDIO_RAY_HEAD_HOST"):
            Settings()


def test_ray_sessions_live_in_the_data_dir_or_behind_a_short_link(tmp_path):
    """Ray's session (logs, sockets) goes under `<data>/ray/tmp`; a data dir too deep for Ray's unix sockets gets a
    short link under /tmp to it, made at the start and removed at the stop (prepared here without Ray)."""
    short = LocalRayHead(Path("/srv/d"))
    assert short.temp_dir == short.session_root == Path("/srv/d/ray/tmp")
    deep = LocalRayHead(tmp_path / ("x" * 60))
    assert deep.temp_dir.parent == Path(tempfile.gettempdir()) and deep.session_root == tmp_path / ("x" * 60) / "ray" / "tmp"
    for i in range(5):
        (deep.session_root / f"session_2026-12-0{i + 1}_00-00-00_000000_1").mkdir(parents=True)
    deep._prepare_temp_dir()
    try:
        assert deep.temp_dir.is_symlink() and deep.temp_dir.resolve() == deep.session_root.resolve()
        kept = sorted(p.name for p in deep.session_root.iterdir())
        assert kept == [f"session_2026-12-0{i}_00-00-00_000000_1" for i in (3, 4, 5)]  # the newest KEEP_SESSIONS
    finally:
        deep._remove_link()
    assert not deep.temp_dir.exists() and deep.session_root.is_dir()


@pytest.mark.ray
@pytest.mark.slow  # a server with its own Ray head, a job that joins it with an actor
def test_the_servers_own_head_listens_on_loopback_only(server_factory, tmp_path):
    """`python -m backend` with no Ray address starts its own head. With a job on it whose driver joined the
    cluster and started an actor (drivers, workers, agents, client server, dashboard all up), no socket of the
    server's process tree listens anywhere but on loopback."""
    import httpx

    from tests.backend.conftest import HTTP_TIMEOUT, REPO, wait_status
    from tests.waiting import wait_for

    server = server_factory(data_dir=tmp_path / "data", env={
        "RLSTUDIO_DISPATCH": "true", "RLSTUDIO_JOB_MODULE": "tests.backend.jobs.ray_actor_job",
        "RLSTUDIO_JOB_WORKDIR": str(REPO), "RLSTUDIO_RAY_NUM_CPUS": "2", "RLSTUDIO_POLL_INTERVAL_S": "0.3"}).start()
    server.wait_dispatch_ready(180)
    r = httpx.post(f"{server.url}/api/v1/runs", json={"name": "ray", "overrides": []}, timeout=HTTP_TIMEOUT)
    assert r.status_code == 201, r.text
    run = r.json()
    wait_status(server.url, run["id"], {"running"})
    pid_file = tmp_path / "data" / "runs" / str(run["id"]) / "checkpoints" / "actor.pid"
    wait_for(pid_file.exists, 300, 0.2, "the job's actor to be up")
    import psutil

    actor = psutil.Process(int(pid_file.read_text()))
    assert server.process.pid in [p.pid for p in actor.parents()]  # the actor is in the tree looked at
    beyond, total = listening_beyond_loopback(server.process.pid)
    assert total >= 10, total  # the server, the GCS, the raylet, the agents, the dashboard, the client server...
    assert beyond == [], "listening beyond loopback:\n" + "\n".join(beyond)
    session = tmp_path / "data" / "ray" / "tmp" / "session_latest" / "logs"
    assert (session / "gcs_server.out").exists() or (session / "gcs_server.err").exists()  # Ray's logs: data dir
    assert httpx.post(f"{server.url}/api/v1/runs/{run['id']}/cancel", timeout=HTTP_TIMEOUT).status_code == 200
