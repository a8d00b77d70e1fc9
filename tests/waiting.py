"""Waiting for a state in a test: the predicate is checked as the state changes (every `interval` s); `timeout` is a
failure guard that names what never happened, never a time the test expects something to take. A predicate that
raises ends the wait at once (a process that exited, a run that failed): that state can never come."""
from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(predicate, timeout: float, interval: float = 0.2, what: str = "condition",
             detail: Callable[[], str] | None = None):
    """predicate()'s first truthy value; `detail` (e.g. a log's tail) goes into the timeout's message."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    more = f"\n{detail()}" if detail is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}{more}")


def alive(process, log: Callable[[], str] = lambda: "") -> None:
    """Fails at once when `process` (a Popen) has exited: what it was to do can no longer happen."""
    if process.poll() is not None:
        raise AssertionError(f"the process exited ({process.returncode}) before the state came: {log()}")


def wait_serving(url: str, process, timeout: float, log: Callable[[], str] = lambda: "") -> None:
    """Until the server `process` started answers GET {url}/healthz with 200; its exit fails at once, with `log`."""
    import httpx

    def up() -> bool:
        alive(process, log)
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:  # not listening yet, or too busy to answer this time
            return False

    wait_for(up, timeout, 0.2, f"{url}/healthz to answer", log)


def wait_dispatch_ready(url: str, timeout: float, log: Callable[[], str] = lambda: "") -> str:
    """The server's dispatch state ("ray ...") once it is ready; an "error ..." state fails at once."""
    import httpx

    def ready() -> str | None:
        try:
            state = httpx.get(f"{url}/healthz", timeout=60).json()["dispatch"]
        except httpx.TimeoutException:  # a starved machine (a Ray head starting beside a busy suite): not yet
            return None
        assert not state.startswith("error"), f"{state}\n{log()}"
        return state if state.startswith("ray ") else None

    return wait_for(ready, timeout, 0.5, "dispatch to become ready", log)
