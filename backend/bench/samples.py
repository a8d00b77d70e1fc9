"""Workload S1 (`python -m backend.bench --workload samples`): keep up with a GPU run's samples.

One W1-sized step (one GRPO step on one H200, 4.5 s): 512 answers of 256 tokens, each with per-token text,
log-probs, reference log-probs and advantages. The engine's own DashboardLogger sends each step as it does
in a run (64 answers a request, one request after another) to a fresh local server; timed from
`log_samples` to the server having acknowledged the last request (goal <= 1 s a step). Meanwhile a chart
query (5 keys x 8 runs' worth of series of the same run) runs in a loop: its latency during ingest against
idle says whether charts stay responsive. Storage per step is the database's growth (WAL checkpointed).
With `--browser` the Samples page of the last step is opened in headless Chromium: navigation start ->
its first 200 answer cards drawn (list view), and -> the dense table's rows drawn (goal <= 1 s).
"""
from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import threading
import time
from pathlib import Path

import httpx

from backend.bench.metrics import Rlstudio, percentile

WORDS = ("the", " answer", " is", " 4", "2", ".", " First", ",", " add", " both", " numbers", " then", " carry",
         " one", "\n", " so", " we", " get", " total", " =")


def step_samples(step: int, answers: int, tokens: int, group: int = 8) -> list[dict]:
    """`answers` answers of `tokens` tokens, `group` per prompt, with the per-token arrays a GRPO step with a
    reference logs."""
    rng = random.Random(step)
    out = []
    for i in range(answers):
        pieces = [rng.choice(WORDS) for _ in range(tokens)]
        log_probs = [-abs(rng.gauss(0.3, 0.5)) for _ in range(tokens)]
        advantage = rng.gauss(0, 1)
        out.append({"step": step, "split": "train", "prompt_index": step * 1000 + i // group,
                    "group_uid": f"{step}-{i // group}", "data_source": "openai/gsm8k",
                    "prompt": f"Question {i // group}: Natalia sold clips to {48 + i // group} of her friends in "
                              "April, and then she sold half as many clips in May. How many clips did she sell "
                              "altogether in April and May? Let's think step by step.",
                    "response": "".join(pieces), "score": float(rng.random() < 0.4), "ground_truth": "72",
                    "tokens": pieces, "old_log_probs": log_probs,
                    "ref_log_probs": [lp + rng.gauss(0, 0.05) for lp in log_probs],
                    "advantages": [advantage] * tokens})
    return out


def database_bytes(path: Path) -> int:
    """Pages in use (a checkpoint first, so what the WAL holds is counted)."""
    db = sqlite3.connect(path, timeout=30)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages, free, size = (db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count",
                                                                                 "page_size"))
        return (pages - free) * size
    finally:
        db.close()


class ChartLoop:
    """The Run page's chart query in a loop on its own connection; latencies tagged ingesting or idle."""

    def __init__(self, url: str, run_id: int, keys: list[str]):
        self.url, self.params = url, [("run_id", run_id)] + [("key", k) for k in keys] + [("max_points", 1000)]
        self.ingesting = False
        self.times: dict[bool, list[float]] = {True: [], False: []}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        with httpx.Client(timeout=60) as http:
            while not self._stop.is_set():
                state = self.ingesting
                t0 = time.perf_counter()
                http.get(f"{self.url}/api/v1/metrics", params=self.params).raise_for_status()
                if state == self.ingesting:
                    self.times[state].append(time.perf_counter() - t0)
                time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def first_paint(url: str, run_id: int, step: int, repeat: int) -> dict[str, list[float]]:
    """Seconds from navigation start to the Samples page's answers drawn, list and table views."""
    from playwright.sync_api import sync_playwright

    from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS

    # resolves with performance.now() (ms since navigation start) on the first frame that shows the answers
    wait = """([selector, n]) => new Promise((resolve) => {
        const check = () => document.querySelectorAll(selector).length >= n ? resolve(performance.now())
            : requestAnimationFrame(check);
        check();
    })"""
    views = {"list": ("", ".samples-list .sample-card", 200), "table": ("&view=table", ".st-body [role=row]", 10)}
    timings: dict[str, list[float]] = {view: [] for view in views}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        for view, (query, selector, count) in views.items():
            for i in range(repeat + 1):  # the first load warms the HTTP cache (the JS bundle)
                page = browser.new_page(viewport={"width": 1600, "height": 1000})
                page.goto(f"{url}/runs/{run_id}/samples?step={step}{query}", wait_until="commit")
                ms = page.evaluate(wait, [selector, count])
                if i > 0:
                    timings[view].append(ms / 1000)
                page.close()
        browser.close()
    return timings


def main(args: argparse.Namespace, workdir: Path) -> None:
    answers, tokens, steps = args.answers, args.tokens, args.steps
    print(f"S1: {steps} steps of {answers} answers x {tokens} tokens (tokens, log-probs, reference log-probs, "
          f"advantages), sent by the engine's DashboardLogger (64 answers a request)", flush=True)
    from engine.loggers.dashboard import DashboardLogger

    server = Rlstudio(workdir)
    try:
        server.create_runs(1)
        run_id, token = server.runs[0]
        keys = [f"bench/key_{i:02d}" for i in range(20)]
        with httpx.Client(timeout=60) as http:  # a run's worth of charts: 20 keys x 2,000 steps
            for start in range(0, args.chart_steps, 50):
                server.ingest(http, 0, range(start, start + 50))
        db = workdir / "rlstudio" / "rlstudio.db"
        before = database_bytes(db)
        batches = [step_samples(step, answers, tokens) for step in range(1, steps + 1)]
        logger = DashboardLogger(server.url, run_id, token, spool_dir=str(workdir / "spool"), quiet=True)
        chart = ChartLoop(server.url, run_id, keys[:5])
        time.sleep(args.pause)  # idle chart latencies first
        ingest = []
        for step, batch in enumerate(batches, start=1):
            chart.ingesting = True
            t0 = time.perf_counter()
            logger.log_samples(step, batch)
            assert logger.flush(120), "the server did not take the samples"
            ingest.append(time.perf_counter() - t0)
            chart.ingesting = False
            print(f"  step {step}: {answers} answers ingested in {ingest[-1]:.2f} s", flush=True)
            time.sleep(args.pause)  # a GPU step takes 4.5 s: the server is idle between steps
        chart.stop()
        logger.close()
        per_step = (database_bytes(db) - before) / steps
        stored = httpx.get(f"{server.url}/api/v1/runs/{run_id}/samples/steps", timeout=30).json()["data"]
        assert [s["count"] for s in stored] == [answers] * steps, stored
        busy, idle = chart.times[True], chart.times[False]
        print(f"samples ingest, one step of {answers} answers: median {statistics.median(ingest):.2f} s, "
              f"max {max(ingest):.2f} s (goal <= 1 s)")
        print(f"storage: {per_step / 2**20:.1f} MiB per step ({per_step / answers / 1024:.1f} KiB per answer)")
        print(f"chart query (5 series x {args.chart_steps:,} steps) while ingesting: p50 {percentile(busy, 50) * 1000:.0f} ms, "
              f"p95 {percentile(busy, 95) * 1000:.0f} ms over {len(busy)} queries; idle: p50 "
              f"{percentile(idle, 50) * 1000:.0f} ms" if busy and idle else "chart query: too few samples")
        if args.browser:
            timings = first_paint(server.url, run_id, steps, args.repeat)
            for view, what in (("list", "200 answer cards"), ("table", "the dense table")):
                print(f"Samples page first paint ({what}, step of {answers} answers): best {min(timings[view]):.2f} s, "
                      f"median {statistics.median(timings[view]):.2f} s (goal <= 1 s)")
    finally:
        server.stop()
