"""The suite's clean-up of Ray's leftovers under /tmp (tests/ray_leftovers.py), on a planted temp dir: sessions
whose starter is gone and head links go; a session whose starter runs, or that a running process names, stays."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

from tests.ray_leftovers import leftovers, remove
from tests.waiting import alive, wait_for


def wait_named(process: subprocess.Popen, path) -> None:
    """Until the process's command line names `path`: between fork and exec it still shows its parent's."""
    def named() -> bool:
        alive(process)
        with open(f"/proc/{process.pid}/cmdline", "rb") as f:
            return str(path).encode() in f.read()

    wait_for(named, 60, 0.05, f"process {process.pid} to name {path}")


def test_leftovers_nothing_uses_are_removed_the_rest_stay(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    gone_pid = int(dead.stdout)
    ray = tmp_path / "ray"
    old = ray / f"session_2026-12-07_05-00-00_000001_{gone_pid}"
    mine = ray / f"session_2026-12-07_05-00-01_000002_{os.getpid()}"  # its starter (this process) runs
    for d in (old, mine):
        (d / "logs").mkdir(parents=True)
    (ray / "session_latest").symlink_to(old)
    link = tmp_path / "rlstudio-ray-0123456789"
    link.symlink_to(tmp_path / "elsewhere")
    busy = tmp_path / "rlstudio-ray-busy"
    busy.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(600)", str(busy)])
    try:
        wait_named(sleeper, busy)
        assert leftovers(tmp_path) == {old, mine, link, busy}
        assert sorted(remove(leftovers(tmp_path))) == sorted([old, link])
        assert not old.exists() and not link.is_symlink() and mine.is_dir() and busy.is_dir()
        assert not (ray / "session_latest").is_symlink()  # it pointed at the session removed
    finally:
        sleeper.kill()
        sleeper.wait()
    assert remove({busy}) == [busy] and not busy.exists()


def test_a_session_whose_ray_processes_are_still_ending_is_waited_for(tmp_path):
    """Its starter has exited, a process of it (naming its path) ends a moment later: removed once it has."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    session = tmp_path / "ray" / f"session_2026-12-07_05-00-00_000001_{int(dead.stdout)}"
    session.mkdir(parents=True)
    # it ends when the test closes its stdin, not after a time
    ending = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", str(session)],
                              stdin=subprocess.PIPE)
    try:
        wait_named(ending, session)
        assert remove({session}) == [] and session.exists()  # no grace: still named, so it stays
        went = []
        waiter = threading.Thread(target=lambda: went.extend(remove({session}, grace=120)))  # 120: a hang guard
        waiter.start()
        ending.stdin.close()
        waiter.join()
        assert went == [session] and not session.exists()
        assert ending.poll() is not None  # it went only after the process naming it had ended
    finally:
        ending.kill()
        ending.wait()
