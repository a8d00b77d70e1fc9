"""The suite's clean-up of Ray's leftovers under /tmp (tests/ray_leftovers.py), on a planted temp dir: sessions
whose starter is gone and head links go; a session whose starter runs, or that a running process names, stays."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.ray_leftovers import leftovers, remove


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
    ending = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(1)", str(session)])
    try:
        assert remove({session}, grace=120) == [session] and not session.exists()  # 120: a hang guard
        assert ending.poll() is not None  # it went only after the process naming it had ended
    finally:
        ending.kill()
        ending.wait()
