"""The server's own Ray head: ports that never repeat, one retry with new ports when `ray start` fails, and
re-attaching to (or cleaning up after) the head an earlier server left on the same data dir."""
from __future__ import annotations

import logging
import os
import signal
import socket

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
