"""The dashboard logger against a server that dies mid-answer (kill -9 between storing a request and finishing
its reply): the client sees `http.client.IncompleteRead`, which is neither an OSError nor a URLError. It must
count as "not delivered" (sent again; the server upserts) and never end the logger's thread: a CI run lost a
step's samples when it did (the thread died with its batch in hand)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.loggers.dashboard import DashboardLogger


class FlakyServer:
    """Stores every request body it reads; answers the first `cut` requests to a path ending in `cut_path`
    with a broken reply (`how`: 'incomplete' = headers promise a body that never comes; 'garbage' = not JSON)."""

    def __init__(self, cut: int, cut_path: str, how: str):
        self.bodies: list[tuple[str, dict]] = []
        self.cut, self.cut_path, self.how = cut, cut_path, how
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.bodies.append((self.path, body))
                    broken = self.path.endswith(outer.cut_path) and outer.cut > 0
                    if broken:
                        outer.cut -= 1
                if broken and outer.how == "incomplete":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n")
                    self.wfile.flush()
                    self.close_connection = True
                    return
                reply = b"<html>proxy</html>" if broken else b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("how", ["incomplete", "garbage"])
@pytest.mark.parametrize("cut_path", ["/metrics", "/samples"])
def test_a_cut_answer_is_sent_again_and_the_logger_keeps_going(tmp_path, how, cut_path):
    with FlakyServer(cut=2, cut_path=cut_path, how=how) as server:
        logger = DashboardLogger(server.url, 7, spool_dir=str(tmp_path), flush_interval=0.05, quiet=True)
        for step in range(1, 5):
            logger.log_metrics(step, {"loss": step / 10})
            logger.log_samples(step, [{"prompt": "p", "response": f"r{step}-{i}"} for i in range(3)])
            assert logger.flush(60), f"step {step} not delivered"
            assert logger._thread.is_alive(), "the logger's thread died on a cut answer"
        logger.log_status("succeeded")
        logger.close()
    assert server.cut == 0, "the server never cut an answer: the test checked nothing"
    points = {(p["key"], p["step"]) for path, body in server.bodies if path.endswith("/metrics")
              for p in body["points"]}
    assert points == {("loss", step) for step in range(1, 5)}
    samples = {(s["step"], s["sample_index"], s["response"]) for path, body in server.bodies
               if path.endswith("/samples") for s in body["samples"]}
    assert samples == {(step, i, f"r{step}-{i}") for step in range(1, 5) for i in range(3)}
    assert server.bodies[-1][1]["status"] == "succeeded"
    assert not list(tmp_path.glob("*.jsonl")), "everything was delivered: nothing left in the spool"
