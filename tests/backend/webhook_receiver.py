"""A real HTTP receiver for webhook tests: `http.server` on 127.0.0.1 in a thread, recording every request (path,
headers, JSON body) and answering from a script of statuses (the last one repeats)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, statuses: list[int] | None = None):
        self.statuses = list(statuses or [200])
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                    receiver.requests.append({"path": self.path, "headers": dict(self.headers),
                                              "body": json.loads(body), "answered": status})
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok" if status < 300 else b"no")

            def log_message(self, *args):  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def bodies(self, path: str) -> list[dict]:
        with self._lock:
            return [r["body"] for r in self.requests if r["path"] == path]
