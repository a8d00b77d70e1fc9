"""Benchmark (issue 4, section 6): seed the database directly with 10 runs x 10 metrics x 100,000 steps, then
measure in headless Chromium the Compare page's first paint of its 10 charts (goal <= 0.5 s, issue 35).

    .venv/bin/python tests/ui/bench_compare.py [--runs 10] [--keys 10] [--steps 100000] [--repeat 5] [--data-dir DIR]

Needs the built UI (scripts/setup_frontend.sh) and /usr/bin/chromium. Prints the metrics API time and the
time to 10 painted charts (navigation start -> every chart drawn with its points), best and median. The
figures, before and after each change, with the machine's load: engine/bench/README.md (the Dashboard rows); on a
shared 2-core machine compare only runs alternated in one sitting (e.g. two builds' frontend/dist swapped)."""
from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS, Server  # noqa: E402

KEYS = ["critic/score/mean", "actor/pg_loss", "critic/vf_loss", "actor/reward_kl_penalty", "actor/entropy",
        "response_length/mean", "actor/grad_norm", "actor/lr", "timing_s/step", "perf/throughput"]


def seed(server: Server, data_dir: Path, runs: int, keys: list[str], steps: int) -> list[int]:
    ids = []
    for r in range(runs):
        run = server.api.external_run(f"bench-{r}", overrides=[f"actor_rollout_ref.actor.optim.lr={(r + 1)}e-6"])
        server.api.status(run, "succeeded")
        ids.append(run["id"])
    import numpy as np

    from backend.services import metric_buckets

    db = sqlite3.connect(data_dir / "rlstudio.db")
    db.execute("PRAGMA synchronous=OFF")
    t0 = time.time()
    step = np.arange(1, steps + 1)
    walls = (1.7e9 + step * 3.0).tolist()
    step_list = step.tolist()
    for r, run_id in enumerate(ids):
        for k, key in enumerate(keys):
            values = (np.sin(step / 5000 + k + r) + 0.001 * (step % 97) + 0.05 * r).tolist()
            db.executemany(f"INSERT INTO metric_point (run_id, key, step, value, wall_time) VALUES ({run_id}, ?, ?, ?, ?)",
                           zip([key] * steps, step_list, values, walls))
        db.commit()
    t1 = time.time()
    metric_buckets.rebuild(lambda sql, params=(): db.execute(sql, params).fetchall(), ids)  # what ingest maintains
    db.commit()
    db.close()
    print(f"seeded {runs} runs x {len(keys)} keys x {steps:,} steps = {runs * len(keys) * steps:,} points "
          f"in {t1 - t0:.1f} s (+ {time.time() - t1:.1f} s for the metric buckets)", flush=True)
    return ids


WAIT_ALL_CHARTS = """(n) => new Promise((resolve) => {
    const check = () => {
        const charts = [...document.querySelectorAll('[data-chart]')];
        if (charts.length >= n && charts.every(c => Number(c.dataset.points) > 0 && c.querySelector('.plot[data-ready="true"]')
                && c.querySelector('.main-svg .scatterlayer .trace'))) resolve(performance.now());
        else requestAnimationFrame(check);
    };
    check();
})"""

RESOURCES = """() => performance.getEntriesByType('resource').map(e => [e.name.replace(location.origin, ''),
    Math.round(e.startTime), Math.round(e.responseEnd)])"""

# where the time of one load went (ms after navigation start): the JS, the metrics request (and its size), the
# charts' Plotly draws (components/Plot.tsx measures each as "plot")
BREAKDOWN = """() => {
    const res = performance.getEntriesByType('resource');
    const js = res.filter(e => /\\.js$/.test(e.name));
    const metrics = res.filter(e => e.name.includes('/api/v1/metrics'));
    const plots = performance.getEntriesByType('measure').filter(m => m.name === 'plot');
    const nav = performance.getEntriesByType('navigation')[0];
    return {
        html: nav ? nav.responseEnd : null,
        js: js.length ? Math.max(...js.map(e => e.responseEnd)) : null,
        metricsStart: metrics.length ? Math.min(...metrics.map(e => e.startTime)) : null,
        metricsEnd: metrics.length ? Math.max(...metrics.map(e => e.responseEnd)) : null,
        metricsBytes: metrics.reduce((n, e) => n + (e.decodedBodySize || 0), 0),
        metricsWire: metrics.reduce((n, e) => n + (e.encodedBodySize || 0), 0),
        firstPlotStart: plots.length ? Math.min(...plots.map(m => m.startTime)) : null,
        plots: plots.length,
        lastPlotEnd: plots.length ? Math.max(...plots.map(m => m.startTime + m.duration)) : null,
    };
}"""


def print_breakdown(b: dict, painted_ms: float) -> None:
    """One load's time line: what ran before the request, the request, the client's work before the first draw,
    the draws, and what came after them."""
    if None in (b["metricsStart"], b["metricsEnd"], b["firstPlotStart"], b["lastPlotEnd"]):
        print(f"      (no breakdown: {b})")
        return
    print(f"      boot (HTML, JS, first render) -> metrics request sent {b['metricsStart']:5.0f} ms | request "
          f"{b['metricsEnd'] - b['metricsStart']:5.0f} ms ({b['metricsBytes'] / 1e6:.2f} MB JSON) | JSON to series and "
          f"traces {b['firstPlotStart'] - b['metricsEnd']:5.0f} ms | {b['plots']} Plotly draws "
          f"{b['lastPlotEnd'] - b['firstPlotStart']:5.0f} ms | to paint {painted_ms - b['lastPlotEnd']:4.0f} ms "
          f"(JS files all in at {b['js']:.0f} ms)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--keys", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--data-dir", type=Path, help="keep the seeded database here and reuse it on the next call "
                                                  "(default: a temporary directory)")
    ap.add_argument("--verbose", action="store_true", help="print the page's requests and their timings")
    args = ap.parse_args()
    keys = KEYS[: args.keys]
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_dir or Path(tmp)
        data_dir.mkdir(parents=True, exist_ok=True)
        reuse = (data_dir / "rlstudio.db").exists()
        server = Server(data_dir, dispatch=False)
        try:
            if reuse:
                ids = [r["id"] for r in server.api.get("/api/v1/runs?limit=500")["data"]]
                print(f"reusing {data_dir / 'rlstudio.db'}: {len(ids)} runs")
            else:
                ids = seed(server, data_dir, args.runs, keys, args.steps)
            query = "&".join([f"run_id={i}" for i in ids] + [f"key={k}" for k in keys])
            for _ in range(3):
                t0 = time.time()
                server.api.get(f"/api/v1/metrics?{query}&max_points=500", timeout=900)
                print(f"metrics API (the Compare page's chart query, {len(ids) * len(keys)} series): "
                      f"{time.time() - t0:.2f} s")
            url = f"{server.url}/compare?runs={','.join(map(str, ids))}"
            timings = []
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                for i in range(args.repeat + 1):  # the first load warms the HTTP cache (the JS bundle)
                    page = browser.new_page(viewport={"width": 1600, "height": 1000})
                    page.goto(url, wait_until="commit")
                    ms = page.evaluate(WAIT_ALL_CHARTS, len(keys))
                    if i > 0:
                        timings.append(ms / 1000)
                        print(f"  load {i}: {len(keys)} charts painted {ms / 1000:.2f} s after navigation start",
                              flush=True)
                        print_breakdown(page.evaluate(BREAKDOWN), ms)
                    if args.verbose:
                        for name, t_start, t_end in page.evaluate(RESOURCES):
                            print(f"      {t_start:6d} -> {t_end:6d} ms  {name[:110]}")
                    page.close()
                browser.close()
            print(f"Compare page, {len(ids)} runs x {len(keys)} charts x {args.steps:,} steps: "
                  f"best {min(timings):.2f} s, median {statistics.median(timings):.2f} s (goal <= 0.5 s)")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
