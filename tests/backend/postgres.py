"""A real PostgreSQL server for the database tests: Debian's `postgresql` package (scripts/setup.sh installs it
when it is missing and the set-up runs as root), `initdb` in a temporary directory, a free port on 127.0.0.1,
stopped (and its directory removed) at the end of the session. One server per pytest(-xdist) worker; each test
gets a database of its own, copied from a migrated template (CREATE DATABASE ... TEMPLATE: a file copy)."""
from __future__ import annotations

import glob
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from itertools import count
from pathlib import Path

from backend.services.dispatch.ports import free_port

USER = "rlstudio"  # the server's superuser (trust authentication on 127.0.0.1 and its own socket only)


def binaries() -> Path | None:
    """The newest /usr/lib/postgresql/<version>/bin holding initdb, pg_ctl and postgres (PG_BIN overrides)."""
    if os.environ.get("PG_BIN"):
        candidates = [Path(os.environ["PG_BIN"])]
    else:
        candidates = sorted(map(Path, glob.glob("/usr/lib/postgresql/*/bin")), key=_version, reverse=True)
    for path in candidates:
        if all((path / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return path
    return None


def _version(bin_dir: Path) -> int:
    return int(bin_dir.parent.name) if bin_dir.parent.name.isdigit() else 0


def unavailable() -> str | None:
    """Why the PostgreSQL tests cannot run here, or None."""
    if binaries() is None:
        return ("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): `apt-get install postgresql`, "
                "which scripts/setup.sh does when run as root")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the PostgreSQL driver is not installed: pip install 'psycopg[binary]' (in the dev extra)"
    if os.geteuid() == 0 and _unprivileged() is None:
        return "running as root, and neither a `postgres` nor a `nobody` user exists to run PostgreSQL as"
    return None


def _unprivileged() -> pwd.struct_passwd | None:
    """initdb and postgres refuse to run as root: as root they run as Debian's `postgres` user (else nobody)."""
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    return None


class PostgresServer:
    def __init__(self) -> None:
        self.bin = binaries()
        assert self.bin is not None, unavailable()
        self.user = _unprivileged() if os.geteuid() == 0 else None
        # not pytest's tmp_path: its parents are private to root, and the server may run as another user
        self.root = Path(tempfile.mkdtemp(prefix="rlstudio-pg-"))
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port: int | None = None
        self.migrated: str | None = None  # the template database (the conftest's `postgres` fixture migrates it)
        self._watchdog: subprocess.Popen | None = None
        self.version = _version(self.bin)
        self._names = count(1)

    def _command(self, *args: str) -> list[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self.user is not None:
            cmd = ["setpriv", f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}", "--clear-groups", *cmd]
        return cmd

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        done = subprocess.run(self._command(*args), cwd=self.root, capture_output=True, text=True, timeout=timeout,
                              check=False, env={**os.environ, "LC_ALL": "C.UTF-8"})
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed ({done.returncode}): {done.stdout}{done.stderr}"
                               f"{self.log.read_text()[-3000:] if self.log.exists() else ''}")
        return done

    def start(self) -> PostgresServer:
        # Stops the server and removes its directory once this process is gone, however it ends (even kill -9):
        # it waits for the end of a pipe only this process holds
        stop = shlex.join(self._command("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"))
        pid_file, root = shlex.quote(str(self.data / "postmaster.pid")), shlex.quote(str(self.root))
        self._watchdog = subprocess.Popen(["sh", "-c", f"cat >/dev/null; [ -f {pid_file} ] && {stop}; rm -rf {root}"],
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
        self._run("initdb", "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8",
                  "--no-sync", "--no-instructions")
        for attempt in range(5):  # another process may take the free port first: try the next one
            self.port = free_port()
            options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                       "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200 "
                       "-c shared_buffers=32MB")
            try:
                self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "120",
                          "start")
                return self
            except RuntimeError:
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, dbname="postgres", autocommit=True) as c:
            c.execute(sql)

    def create_database(self, template: str | None = None) -> str:
        """A new, empty database (or a copy of `template`): its SQLAlchemy URL."""
        name = f"db{next(self._names)}"
        # FILE_COPY (PostgreSQL 15+; before, the only way): a copy of the template's files and a checkpoint, cheap
        # with fsync off; 15's default WAL-logs every page of the copy instead
        copy = f' TEMPLATE "{template}"' + (" STRATEGY = FILE_COPY" if self.version >= 15 else "") if template else ""
        self.admin(f'CREATE DATABASE "{name}"{copy}')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        force = " WITH (FORCE)" if self.version >= 13 else ""  # 13+: ends the connections a test left open
        self.admin(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}"{force}')

    def stop(self) -> None:
        if self.port is not None and (self.data / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "60", "stop")
            except RuntimeError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)
        if self._watchdog is not None:
            self._watchdog.stdin.close()
            self._watchdog.wait(60)
