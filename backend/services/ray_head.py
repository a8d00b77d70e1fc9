"""A local Ray head owned by the server: `ray start --head --block` on 127.0.0.1 with token auth, its own
ports (never Ray's defaults, so it can live beside other clusters) and its own token file.

Loopback only, by default. `ray start --node-ip-address 127.0.0.1` alone is not enough: Ray 2.60 swaps a loopback
node address for the machine's own ("remotely reachable") one, and its components bind according to that address:
the GCS and the raylet's node and object managers on every interface (`::`), the dashboard agent, the runtime-env
agent and the client server on the machine's address. With RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (Ray's switch for
single-machine clusters, on by default on macOS and Windows) Ray keeps 127.0.0.1 as the node's address, and every
component, the C++ ones included, listens on loopback only; the one thing it refuses then is another node joining
(`ray start --address=...`), which a local head never needs. `ray_head_host` (RLSTUDIO_RAY_HEAD_HOST) set to
another address of this machine is the explicit choice to let other machines in: Ray then listens as it does by
default (all interfaces for the GCS and the raylet), token auth stays on, and the server logs a warning.

The head outlives a server that is killed (it runs in its own session), so it records itself in
`<data_dir>/ray/head.json` (address, pid, process group, start time); the next server on the same data dir
re-attaches to it instead of starting a second one, and its running jobs carry on. Stopping signals the
recorded process and then kills whatever is left in its process group."""
from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger("rlstudio.ray_head")

# The components `ray start --head` gets a port for from us: each its own (Ray refuses a port given twice). The
# node manager and object manager pick their own (port 0, bound by the component itself: nothing to race).
PORT_FLAGS = ("--port", "--dashboard-port", "--ray-client-server-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port")
SELF_CHOSEN_PORTS = ("--node-manager-port", "0", "--object-manager-port", "0",
                     # workers bind ports the OS picks: Ray's default range (10002-19999) is the same for every
                     # cluster on the machine, so a second one (the user's, a test's) would hand out the same ports
                     "--min-worker-port", "0", "--max-worker-port", "0")
LOWEST_PORT = 20000
LOOPBACK_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray keeps a loopback node address (see above)
# Ray's unix sockets live under the temp dir (`<temp>/session_<date>_<time>_<micros>_<pid>/sockets/<name>`: the
# object store's, one per dashboard module, `dash_MetricsHead`...) and AF_UNIX paths are at most 107 bytes: a temp
# dir longer than this goes under /tmp instead (24: the longest socket name, with room to spare)
MAX_TEMP_DIR_BYTES = 107 - len("/session_2026-12-07_05-23-16_486943_4194304/sockets/") - 24


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


def read_token(path: Path) -> str:
    return path.read_text().strip()


def ensure_token(path: Path) -> str:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return read_token(path)


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid, it names
    one process for good (a reused pid has another start time). None: no such process (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])


def process_group_members(pgid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry))
    return out


@dataclass
class HeadRecord:
    """What `<data_dir>/ray/head.json` says about a running head."""

    address: str  # the dashboard / job API, http://127.0.0.1:PORT
    gcs_address: str  # 127.0.0.1:PORT, for `ray.init(address=...)`
    pid: int  # the `ray start --block` process; it leads its own process group
    start_time: int  # of that pid (process_start_time)
    temp_dir: str
    server_pid: int

    def alive(self) -> bool:
        return process_start_time(self.pid) == self.start_time


class HeadClosed(RuntimeError):
    """A start that the server's shutdown (LocalRayHead.close) overtook."""


def temp_dir_for(data_dir: Path) -> Path:
    """The temp dir Ray is given: `<data_dir>/ray/tmp`, where the head's session (its logs, sockets, spilled objects)
    lives beside the rest of the server's data, or where that path is too long for Ray's unix sockets a short link
    to it, /tmp/rlstudio-ray-<hash of the data dir> (made by the start, removed by the stop)."""
    inside = session_root(data_dir)
    if len(str(inside).encode()) <= MAX_TEMP_DIR_BYTES:
        return inside
    tag = hashlib.sha256(str(data_dir).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"rlstudio-ray-{tag}"


def session_root(data_dir: Path) -> Path:
    return data_dir / "ray" / "tmp"


KEEP_SESSIONS = 3  # a head's start removes its older Ray sessions (logs) but the newest few


class LocalRayHead:
    def __init__(self, data_dir: Path, num_cpus: int | None = None, host: str = "127.0.0.1"):
        self.data_dir = data_dir.resolve()
        self.num_cpus = num_cpus
        # the node's address; anything but loopback opens the head to other machines (module docstring)
        self.host = "127.0.0.1" if host == "localhost" else host
        self.loopback = is_loopback(self.host)
        self.token_path = self.data_dir / "ray" / "auth_token"
        self.record_path = self.data_dir / "ray" / "head.json"
        self.log_path = self.data_dir / "ray" / "head.log"
        self.session_root = session_root(self.data_dir)  # where Ray's sessions are
        self.temp_dir = temp_dir_for(self.data_dir)  # the path Ray is given: session_root or a short link to it
        self.process: subprocess.Popen | None = None
        self.record: HeadRecord | None = None
        self.address: str | None = None
        self.token: str | None = None
        self.attached = False  # True: found running (started by an earlier server on this data dir)
        self.previous: HeadRecord | None = None  # the recorded head that was found dead, if any
        # close(): the server is shutting down. A start running in another thread then stops the head it launched
        # (or never launches one) instead of leaving it behind with no server to own it
        self.closed = False
        self._launch_lock = threading.Lock()

    def env(self) -> dict[str, str]:
        # no 30 s drain on SIGTERM: the server stops its head only when it shuts down (or the head is dead)
        env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path),
               "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
        # loopback: every component on 127.0.0.1 (module docstring); it reaches the jobs' drivers and workers too
        env[LOOPBACK_ONLY_ENV] = "0" if self.loopback else "1"
        return env

    def alive(self) -> bool:
        """Whether the head this object started or adopted still runs (`ray start --block` exits, taking every
        component down, when one of them dies)."""
        record = self.record
        return record is not None and record.alive()

    def why_dead(self) -> str:
        """What the head wrote last, plus Ray's own logs of the components that most often die first."""
        parts = [f"`ray start --head` said: {self._log_error()}"]
        root = self.session_root if (self.session_root / "session_latest").exists() else self.temp_dir
        logs = root / "session_latest" / "logs"
        for name in ("dashboard.err", "dashboard.log", "raylet.err", "gcs_server.err"):
            try:
                lines = [x.strip() for x in (logs / name).read_text(errors="replace").splitlines() if x.strip()]
            except OSError:
                continue
            errors = [x for x in lines[-200:] if "error" in x.lower() or "exception" in x.lower()]
            if errors:
                parts.append(f"{name}: {errors[-1][:300]}")
        return "; ".join(parts)

    # ------------------------------------------------------------------------------------- record
    def read_record(self) -> HeadRecord | None:
        try:
            return HeadRecord(**json.loads(self.record_path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _write_record(self, record: HeadRecord) -> None:
        tmp = self.record_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(record), indent=1))
        os.replace(tmp, self.record_path)

    def _forget_record(self) -> None:
        try:
            self.record_path.unlink()
        except FileNotFoundError:
            pass

    # -------------------------------------------------------------------------------------- start
    def start(self, timeout: float = 120.0) -> str:
        """Re-attach to the head an earlier server left running on this data dir, else start one (retried
        once with new ports if `ray start` fails). Returns the job API address."""
        self.token = ensure_token(self.token_path)
        if self.attach():
            return self.address
        try:
            return self._start_new(timeout)
        except HeadClosed:
            raise
        except RuntimeError as exc:
            log.warning("the local Ray head failed to start (%s); retrying once with new ports", exc)
            self._note(f"rlstudio: the head failed to start ({exc}); retrying once with new ports\n")
            return self._start_new(timeout)

    def attach(self) -> bool:
        """Adopt the recorded head if its process is the one recorded and its job API answers our token."""
        record = self.read_record()
        if record is None:
            return False
        self.token = self.token or ensure_token(self.token_path)
        self.address = record.address
        if record.alive() and self._wait_jobs_api(record, 30.0):
            self.record, self.attached = record, True
            log.info("re-attached to the local Ray head at %s (pid %s, started by server pid %s)",
                     record.address, record.pid, record.server_pid)
            return True
        self.previous = record
        log.warning("the recorded local Ray head (pid %s, %s) is gone; cleaning up and starting a new one",
                    record.pid, record.address)
        self._kill_group(record)
        self._forget_record()
        self.address = None
        return False

    def _start_new(self, timeout: float) -> str:
        ports = dict(zip(PORT_FLAGS, self._choose_ports()))
        if not self.loopback:
            log.warning("the local Ray head listens beyond loopback (RLSTUDIO_RAY_HEAD_HOST=%s): its GCS and raylet on "
                        "every interface, token auth on (%s); anyone who can reach this machine's ports and holds the "
                        "token can run code in it", self.host, self.token_path)
        args = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
                # the job API (the dashboard) is the server's alone: loopback whatever the node's address
                "--node-ip-address", self.host, "--dashboard-host", "127.0.0.1", "--temp-dir", str(self.temp_dir),
                "--disable-usage-stats", "--include-dashboard", "true", *SELF_CHOSEN_PORTS]
        for flag, port in ports.items():
            args += [flag, str(port)]
        if self.num_cpus is not None:
            args += ["--num-cpus", str(self.num_cpus)]
        env = dict(os.environ, **self.env())
        env.pop("RAY_ADDRESS", None)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._launch_lock, open(self.log_path, "ab") as log_file:
            if self.closed:
                raise HeadClosed("the server is shutting down: the local Ray head is not started")
            self._prepare_temp_dir()  # after the check: a start that is refused leaves no link behind
            self.process = subprocess.Popen(args, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        record = HeadRecord(address=f"http://127.0.0.1:{ports['--dashboard-port']}",
                            gcs_address=f"{self._gcs_host()}:{ports['--port']}", pid=self.process.pid,
                            start_time=process_start_time(self.process.pid) or 0, temp_dir=str(self.temp_dir),
                            server_pid=os.getpid())
        self.address, self.record = record.address, record
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.closed:  # close() stopped it (or is stopping it) from the server's thread
                self.stop()
                raise HeadClosed("the server shut down while its local Ray head was starting; the head was stopped")
            if self.process.poll() is not None:
                code, self.process, self.record = self.process.returncode, None, None
                raise RuntimeError(f"`ray start --head` exited with {code}: {self._log_error()} (see {self.log_path})")
            if self._jobs_api_up(record.address):
                self._write_record(record)
                return self.address
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the local Ray head did not come up within {timeout:.0f}s; see {self.log_path}")

    def _prepare_temp_dir(self) -> None:
        """The session root exists, with its older sessions pruned, and the short link to it if one is needed."""
        self.session_root.mkdir(parents=True, exist_ok=True)
        sessions = sorted(p for p in self.session_root.glob("session_2*") if p.is_dir() and not p.is_symlink())
        for old in sessions[:-KEEP_SESSIONS]:
            shutil.rmtree(old, ignore_errors=True)
        if self.temp_dir == self.session_root:
            return
        if self.temp_dir.is_symlink():
            if Path(os.readlink(self.temp_dir)) == self.session_root:
                return
            self.temp_dir.unlink()
        elif self.temp_dir.exists():  # an earlier version's session directory: Ray's sessions stay there
            log.warning("Ray's sessions go to %s (an earlier rlstudio's directory), not %s", self.temp_dir,
                        self.session_root)
            return
        os.symlink(self.session_root, self.temp_dir)

    def _remove_link(self) -> None:
        if self.temp_dir != self.session_root and self.temp_dir.is_symlink() and \
                Path(os.readlink(self.temp_dir)) == self.session_root:
            self.temp_dir.unlink(missing_ok=True)

    def _gcs_host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    def _choose_ports(self) -> list[int]:
        return free_ports(len(PORT_FLAGS))

    def _log_error(self) -> str:
        """The last error line `ray start` wrote (for the exception and the server log)."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()[-40:]
        except OSError:
            return "no log"
        errors = [x.strip() for x in lines if "Error" in x or "error" in x]
        return (errors or [x.strip() for x in lines if x.strip()] or ["no output"])[-1][:400]

    def _note(self, text: str) -> None:
        with open(self.log_path, "a") as f:
            f.write(text)

    def _jobs_api_up(self, address: str) -> bool:
        request = urllib.request.Request(f"{address}/api/jobs/", headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _wait_jobs_api(self, record: HeadRecord, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self._jobs_api_up(record.address):
                return True
            if time.monotonic() > deadline or not record.alive():
                return False
            time.sleep(0.5)

    # --------------------------------------------------------------------------------------- stop
    def close(self, timeout: float = 15.0) -> None:
        """The server's shutdown: stop the head, also one that a start in another thread is launching now."""
        with self._launch_lock:
            self.closed = True
        self.stop(timeout)

    def stop(self, timeout: float = 15.0) -> None:
        process, record = self.process, self.record
        self.process, self.record = None, None
        if record is None and process is None:
            return
        pid = process.pid if process is not None else record.pid
        if process is not None and process.poll() is None or process is None and record.alive():
            os.kill(pid, signal.SIGTERM)  # `ray start --block` shuts its processes down on SIGTERM
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and (process.poll() is None if process is not None
                                                   else record.alive()):
                time.sleep(0.1)
        if record is not None:
            self._kill_group(record)
        elif process is not None:
            _killpg(pid)
        if process is not None:
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                pass
        self._forget_record()
        self._remove_link()  # Ray's session (its logs) stays in session_root

    def _kill_group(self, record: HeadRecord) -> None:
        """SIGKILL what is left of the head's process group, unless that group id now belongs to another
        process (its leader is a different process than the one recorded)."""
        leader = process_start_time(record.pid)
        if leader is not None and leader != record.start_time:
            return
        if process_group_members(record.pid):
            _killpg(record.pid)
            deadline = time.monotonic() + 5
            while process_group_members(record.pid) and time.monotonic() < deadline:
                time.sleep(0.1)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
