"""Ports for a local Ray head's components and for tests' servers: chosen below the kernel's ephemeral range, each
handed out once per process, free on every address when chosen; and whether a host is a loopback address."""
from __future__ import annotations

import ipaddress
import secrets
import socket
import threading
from pathlib import Path

LOWEST_PORT = 20000


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1, an IPv4-mapped loopback (::ffff:127.0.0.1) or the name localhost."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands out on its own (an outgoing connection, a bind to port 0)."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _candidates():
    """Ports to try: at random below the kernel's ephemeral range, where nothing takes a port unasked, so a port
    chosen here stays free between the choice and the component binding it (seen: a port taken in that gap by
    another process killed the head's client server, and the head with it). An unusual range: the OS's own."""
    low = ephemeral_range()[0]
    pick = secrets.SystemRandom()
    while True:
        if low - LOWEST_PORT >= 1000:
            yield pick.randint(LOWEST_PORT, low - 1)
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                yield s.getsockname()[1]


def free_ports(count: int) -> list[int]:
    """`count` distinct ports, free on every address, none handed out before by this process. All sockets stay
    bound until every port is chosen."""
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        with _handed_out_lock:
            for tried, port in enumerate(_candidates()):
                if len(ports) == count:
                    break
                if tried > count + 1000:
                    raise RuntimeError(f"could not find {count} free ports")
                if port in _handed_out or port in ports:
                    continue
                s = socket.socket()
                try:
                    s.bind(("0.0.0.0", port))  # fails if anything listens on the port at any address
                except OSError:
                    s.close()
                    continue
                sockets.append(s)
                ports.append(port)
            _handed_out.update(ports)
    finally:
        for s in sockets:
            s.close()
    return ports


def free_port() -> int:
    return free_ports(1)[0]
