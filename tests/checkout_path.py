"""The environment of a test's Python subprocess that must import this checkout: the checkout goes first on
PYTHONPATH and whatever PYTHONPATH the test process had stays behind it. On the GPU machine that inherited entry
holds the carried packages (pydantic & co.); replacing it is what kept a CUDA test from ever running there."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])


def checkout_pythonpath(inherited: str | None = None) -> str:
    """The checkout, then the inherited entries (os.environ's PYTHONPATH unless given)."""
    inherited = os.environ.get("PYTHONPATH") if inherited is None else inherited
    return os.pathsep.join(p for p in (ROOT, inherited) if p)


def with_checkout(env: dict | None = None, **extra: str) -> dict[str, str]:
    """A copy of env (os.environ by default) plus extra, with PYTHONPATH extended by the checkout."""
    out = dict(os.environ if env is None else env, **extra)
    out["PYTHONPATH"] = checkout_pythonpath(out.get("PYTHONPATH", ""))
    return out
