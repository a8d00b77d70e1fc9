"""The engine side of run health (issue 28), without a run: the learning-signal count, the heartbeat's one report
per phase change, the dashboard logger's heartbeat request (sent at once, replaced while waiting, never spooled),
and the console line's validation statistics. A real run's numbers: tests/integration/test_run_health_data.py."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from engine.algos.dynamic_sampling import rows_with_signal
from engine.loggers.base import Logger
from engine.loggers.console import format_step_line
from engine.loggers.dashboard import DashboardLogger
from engine.loggers.tracking import Tracking
from engine.trainer.heartbeat import Heartbeat
from engine.trainer.learning_signal import zero_std_groups
from tests.waiting import wait_for

WAIT = 60  # seconds a state may take to arrive on a loaded machine; never a measured duration


# ---- learning signal -----------------------------------------------------------------------------------


def test_zero_std_groups_counts_groups_of_two_or_more_whose_scores_are_all_equal():
    scores = torch.tensor([1.0, 1.0, 1.0,  0.0, 1.0,  0.5,  0.0, 0.0,  0.25, 0.25000001], dtype=torch.float64)
    uids = ["a", "a", "a", "b", "b", "c", "d", "d", "e", "e"]
    # a: all 1 (no signal), b: differ, c: a lone answer (not a group), d: all 0, e: differ (exactly, as DAPO)
    assert zero_std_groups(scores, uids) == (2, 4)
    assert zero_std_groups(torch.tensor([1.0, 0.0]), ["a", "b"]) == (0, 0)  # rollout.n = 1: no groups


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_zero_std_share_is_what_dapos_filter_drops(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 2, (40,), generator=g).float()
    uids = [f"p{i // 4}" for i in range(40)]
    zero, groups = zero_std_groups(scores, uids)
    _, kept, seen = rows_with_signal(scores, uids)
    assert groups == seen == 10 and zero == seen - kept


# ---- heartbeat -------------------------------------------------------------------------------------------


class Phases(Logger):
    def __init__(self):
        self.seen = []

    def log_phase(self, phase, step):
        self.seen.append((phase, step))


class Old:  # a logger written before log_phase existed (main_ppo.run accepts any object with the calls)
    def log_metrics(self, step, metrics):
        pass


def test_heartbeat_reports_each_phase_change_once_to_every_logger_that_takes_it():
    phases = Phases()
    beat = Heartbeat(Tracking([Old(), phases]))
    for phase, step in [("gen", 1), ("gen", 1), ("reward", 1), ("update_actor", 1), ("update_actor", 1),
                        ("gen", 2), ("validation", 2)]:
        beat.enter(phase, step)
    assert phases.seen == [("gen", 1), ("reward", 1), ("update_actor", 1), ("gen", 2), ("validation", 2)]


class Server:
    """A stand-in for the rlstudio server: records each POST; `hold` makes the first one wait until released."""

    def __init__(self, hold: bool = False):
        self.requests, self.release, self.first = [], threading.Event(), threading.Event()
        if not hold:
            self.release.set()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, body))
                outer.first.set()
                outer.release.wait(WAIT)
                data = b'{"accepted": 0}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def heartbeats(self):
        return [(b["fields"]["heartbeat"]["phase"], b["fields"]["heartbeat"]["step"])
                for p, b in self.requests if p.endswith("/status") and "heartbeat" in b["fields"]]

    def stop(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def test_dashboard_heartbeat_goes_on_the_status_route_at_once(tmp_path):
    server = Server()
    logger = DashboardLogger(server.url, 7, "tok", str(tmp_path), flush_interval=3600, quiet=True)
    try:
        logger.log_phase("gen", 3)
        assert server.first.wait(WAIT)  # sent without waiting for the (hour-long) flush interval
        path, body = server.requests[0]
        assert path == "/api/v1/runs/7/status"
        assert body["status"] == "running" and body["error"] is None
        beat = body["fields"]["heartbeat"]
        assert beat["phase"] == "gen" and beat["step"] == 3 and isinstance(beat["time"], float)
        assert "step" not in body["fields"]  # the run's progress (steps done) is not moved by a heartbeat
    finally:
        logger.close()
        server.stop()


def test_dashboard_heartbeat_carries_the_phase_detail_when_there_is_one(tmp_path):
    """The async trainer's wait_rollout names what the rollout thread is doing (engine/trainer/ASYNC.md)."""
    server = Server()
    logger = DashboardLogger(server.url, 7, "tok", str(tmp_path), flush_interval=3600, quiet=True)
    try:
        logger.log_phase("wait_rollout", 2, detail="rollout generating: step 2 on version 1, for 0.5 s")
        assert server.first.wait(WAIT)
        beat = server.requests[0][1]["fields"]["heartbeat"]
        assert (beat["phase"], beat["detail"]) == ("wait_rollout", "rollout generating: step 2 on version 1, for 0.5 s")
    finally:
        logger.close()
        server.stop()


def test_a_heartbeat_not_yet_sent_is_replaced_by_the_next(tmp_path):
    server = Server(hold=True)
    logger = DashboardLogger(server.url, 7, None, str(tmp_path), flush_interval=3600, quiet=True)
    try:
        logger.log_phase("gen", 1)
        assert server.first.wait(WAIT)  # the sender is now busy with it
        for phase in ("reward", "adv", "update_actor"):
            logger.log_phase(phase, 1)
        server.release.set()
        assert logger.flush(WAIT)
        assert server.heartbeats() == [("gen", 1), ("update_actor", 1)]
    finally:
        logger.close()
        server.stop()


def test_heartbeats_are_not_spooled_while_the_server_is_away(tmp_path):
    server = Server()
    url = server.url
    server.stop()  # nothing listens there now: every request fails at once
    logger = DashboardLogger(url, 7, None, str(tmp_path), flush_interval=3600, close_timeout=2.5, quiet=True)
    logger.log_phase("gen", 1)
    logger.log_metrics(1, {"a": 1.0})
    logger.flush(0)  # the metric goes out now (and fails)
    logger.log_phase("update_actor", 1)
    wait_for(lambda: logger.spooled >= 1, WAIT, 0.01, "the metric in the spool file")
    logger.close()  # what is still queued (the last heartbeat, perhaps) goes to the spool too, heartbeats left out
    pending = logger.spool.pending()
    assert [r["path"] for r in pending] == ["/api/v1/runs/7/metrics"]  # the metric waits; the heartbeats are gone


# ---- console ---------------------------------------------------------------------------------------------


def test_console_line_shows_the_core_validation_statistics():
    line = format_step_line(4, {"val-core/openai/gsm8k/reward/mean@4": 0.5, "val-core/openai/gsm8k/reward/best@4/mean":
                                0.75, "val-core/openai/gsm8k/reward/best@4/std": 0.1,
                                "val-core/openai/gsm8k/reward/maj@4/mean": 0.625, "val-aux/openai/gsm8k/reward/std@4": 0.2,
                                "val-core/dapo/acc/mean@1": 1.0})
    assert line.endswith("openai/gsm8k val@4: 0.5000 | openai/gsm8k best@4: 0.7500 | openai/gsm8k maj@4: 0.6250 | "
                         "dapo acc@1: 1.0")
