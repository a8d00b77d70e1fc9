"""What Ray leaves under the temp dir: `ray.init()`'s sessions (/tmp/ray/session_<date>_<time>_<micros>_<pid>, the
pid of the process that started it) and the short links (or, from older runs, directories) of the server's own
heads (/tmp/rlstudio-ray-*, backend/services/ray_head.py). The suite removes those it created once nothing uses
them (tests/conftest.py)."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path


def leftovers(tmp: Path) -> set[Path]:
    found = set((tmp / "ray").glob("session_2*")) if (tmp / "ray").is_dir() else set()
    return found | set(tmp.glob("rlstudio-ray-*"))


def command_lines() -> list[str]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    out.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return out


def in_use(path: Path, commands: list[str]) -> bool:
    """A session whose starter still runs, or a path some process names (Ray's processes name their session)."""
    starter = path.name.rsplit("_", 1)[-1]
    if path.name.startswith("session_") and starter.isdigit() and Path(f"/proc/{starter}").exists():
        return True
    return any(str(path) in line for line in commands)


def starter_gone(path: Path) -> bool:
    starter = path.name.rsplit("_", 1)[-1]
    return path.name.startswith("session_") and starter.isdigit() and not Path(f"/proc/{starter}").exists()


def remove(paths: set[Path], grace: float = 0.0) -> list[Path]:
    """Remove those of `paths` nothing uses; a dangling session_latest link with them. Returns what went. A
    session whose starter has exited while its Ray processes still end (they follow it within moments) is waited
    for up to `grace` seconds."""
    deadline = time.monotonic() + grace
    commands = command_lines()
    while any(starter_gone(p) and in_use(p, commands) for p in paths) and time.monotonic() < deadline:
        time.sleep(0.2)
        commands = command_lines()
    gone = []
    for path in sorted(paths):
        if in_use(path, commands):
            continue
        if path.is_symlink():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
        gone.append(path)
    for path in {p.parent / "session_latest" for p in gone}:
        if path.is_symlink() and not path.exists():
            path.unlink(missing_ok=True)
    return gone
