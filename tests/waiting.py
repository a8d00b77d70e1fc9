"""Waiting for a state in a test: the predicate is checked as the state changes (every `interval` s); `timeout` is a
failure guard that names what never happened, never a time the test expects something to take."""
from __future__ import annotations

import time


def wait_for(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
