"""The dashboard logger's spool: requests the server did not get yet, in an append-only JSONL file with a
`.offset` file counting the lines delivered, replayed in order when the server is back (by the logger, a later
process with the same spool dir, or by hand: `python -m engine.loggers.dashboard SPOOL_FILE`)."""
from __future__ import annotations

import json
import os
import sys

from engine.loggers.dashboard_wire import ServerRefused, post_json


class Spool:
    """An append-only JSONL file of requests not yet delivered, and how many of its lines were."""

    def __init__(self, path: str):
        self.path = path
        self.offset_path = path + ".offset"
        self.appended = 0

    def _offset(self) -> int:
        try:
            with open(self.offset_path) as f:
                return int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def pending(self) -> list[dict]:
        try:
            with open(self.path, encoding="utf-8") as f:
                lines = [line for line in f if line.strip()]
        except FileNotFoundError:
            return []
        out = []
        for line in lines[self._offset():]:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a torn last line after a crash: it was never acknowledged
                break
        return out

    def append(self, requests: list[dict]) -> None:
        if not requests:
            return
        self.appended += len(requests)
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(request) + "\n" for request in requests)
            f.flush()
            os.fsync(f.fileno())

    def advance(self) -> None:
        tmp = self.offset_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(self._offset() + 1))
        os.replace(tmp, self.offset_path)

    def clear(self) -> None:
        for p in (self.path, self.offset_path):
            try:
                os.remove(p)
            except FileNotFoundError:
                pass


def spoolable(requests) -> list[dict]:
    """What goes to the spool file: everything but heartbeats, which say only what the run is doing now."""
    return [r for r in requests if not r.get("heartbeat")]


def replay(spool_file: str, url: str | None = None, token: str | None = None) -> int:
    """Send a spool file's undelivered requests (in order); returns how many were sent."""
    url = url or os.environ.get("RLSTUDIO_URL") or "http://127.0.0.1:8000"
    token = token or os.environ.get("RLSTUDIO_INGEST_TOKEN") or os.environ.get("RLSTUDIO_API_TOKEN")
    spool = Spool(spool_file)
    sent = 0
    for request in spool.pending():
        try:
            post_json(url.rstrip("/") + request["path"], request["body"], token, 30.0)
        except ServerRefused as exc:
            print(f"refused, skipped: {request['path']}: {exc}", file=sys.stderr)
        spool.advance()
        sent += 1
    spool.clear()
    return sent
