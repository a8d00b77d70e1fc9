"""Workload M1 (`python -m backend.bench [--vs-mlflow] [--mlflow BIN]`) against a fresh local server.

M1: 8 runs x 20 metric keys x 2,000 steps, 8 concurrent clients (one per run), 1,000 points per request
(50 steps x 20 keys -- MLflow's log_batch cap, so both sides send the same requests). Reports ingest
points/s, p50/p95 request latency, the chart query (5 keys x 8 runs, <= 1,000 points per series) and the
ingest -> SSE delivery latency p95. With --vs-mlflow the same workload runs against `mlflow server`
(SQLite backend store) through its REST API, and the ratios are printed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

RUNS, KEYS, STEPS, CLIENTS, STEPS_PER_REQUEST = 8, 20, 2000, 8, 50
CHART_RUNS, CHART_KEYS, CHART_POINTS = 8, 5, 1000


# --health: the 20 keys a training run logs, 16 of them read by the health checks (backend/services/health/)
TRAINING_KEYS = ["training/global_step", "critic/score/mean", "actor/reward_kl_penalty", "actor/entropy",
                 "actor/pg_loss", "actor/grad_norm", "actor/grad_norm_nonfinite", "actor/pg_clipfrac",
                 "actor/rollout_log_probs_absdiff", "critic/vf_loss", "critic/grad_norm", "critic/values/std",
                 "response_length/mean", "response_length/clip_ratio", "actor/lr", "critic/lr", "prompt_length/mean",
                 "perf/throughput", "timing_s/gen", "timing_s/step"]
KEY_SET = {"names": None}


def training_value(run: int, key: int, step: int) -> float:
    """--health: a healthy run's value of TRAINING_KEYS[key] (score rising, KL in its band and 0 at the first step,
    entropy easing, nothing clipped or skipped), with the workload's noise on top."""
    noise, progress = value(run, key, step), step / STEPS
    name = TRAINING_KEYS[key]
    plan = {"training/global_step": float(step), "critic/score/mean": 0.2 + 0.5 * progress + 0.05 * noise,
            "actor/reward_kl_penalty": 0.0 if step <= 1 else 0.02 + 0.05 * noise,
            "actor/entropy": 1.0 - 0.3 * progress + 0.05 * noise, "actor/grad_norm_nonfinite": 0.0,
            "actor/pg_clipfrac": 0.0 if step <= 1 else 0.05 * noise, "critic/values/std": 0.2 + 0.1 * noise,
            "actor/rollout_log_probs_absdiff": 0.0005 + 0.001 * noise, "response_length/clip_ratio": 0.1 * noise,
            "response_length/mean": 100.0 + 10 * noise}
    return plan.get(name, noise)


def key_names() -> list[str]:
    return KEY_SET["names"] or [f"bench/key_{i:02d}" for i in range(KEYS)]


def value(run: int, key: int, step: int) -> float:
    return ((run + 1) * (key + 1) * step) % 997 / 997.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not come up")


# ------------------------------------------------------------------------------------------ rlstudio
class Rlstudio:
    name = "rlstudio"

    def __init__(self, workdir: Path, env: dict[str, str] | None = None, name: str = "rlstudio"):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("RLSTUDIO_")}, **(env or {})}
        env["RLSTUDIO_DISPATCH"] = "false"
        self.log = open(workdir / "rlstudio.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "backend", "--port", str(self.port), "--data-dir",
                                      str(workdir / name), "--log-level", "warning"], env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        wait_http(f"{self.url}/healthz")
        self.http = httpx.Client(base_url=self.url, timeout=60)
        self.runs: list[tuple[int, str]] = []

    def create_runs(self, n: int) -> None:
        for i in range(n):
            r = self.http.post("/api/v1/runs", json={"name": f"bench-{i}", "launch": False,
                                                     "experiment_name": "bench"}).json()
            self.runs.append((r["id"], r["ingest_token"]))

    def ingest(self, client: httpx.Client, run_index: int, steps: range) -> None:
        run_id, token = self.runs[run_index]
        now = time.time()
        make = training_value if KEY_SET["names"] else value
        series = [{"key": k, "steps": list(steps), "values": [make(run_index, ki, s) for s in steps],
                   "wall_times": [now] * len(steps)} for ki, k in enumerate(key_names())]
        r = client.post(f"{self.url}/api/v1/runs/{run_id}/metrics", json={"series": series},
                        headers={"Authorization": f"Bearer {token}"})
        r.raise_for_status()

    def chart(self) -> int:
        params = [("run_id", rid) for rid, _ in self.runs[:CHART_RUNS]] + [
            ("key", k) for k in key_names()[:CHART_KEYS]] + [("max_points", CHART_POINTS)]
        data = self.http.get("/api/v1/metrics", params=params).json()["data"]
        assert all(len(s["steps"]) <= CHART_POINTS for s in data)
        return sum(len(s["steps"]) for s in data)

    def sse_latency(self, samples: int = 100) -> list[float]:
        run_id = self.runs[0][0]
        arrivals: dict[int, float] = {}
        ready = threading.Event()
        stop = threading.Event()

        def listen():
            with httpx.Client(timeout=httpx.Timeout(5, read=None)) as c, \
                    c.stream("GET", f"{self.url}/api/v1/runs/{run_id}/events") as response:
                event, data = None, None
                for line in response.iter_lines():
                    if stop.is_set():
                        return
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data = line[5:].strip()
                    elif not line and event:
                        if event == "hello":
                            ready.set()
                        elif event == "metrics":
                            for _key, step, _v, _t in json.loads(data)["points"]:
                                arrivals.setdefault(step, time.time())
                        event = data = None

        thread = threading.Thread(target=listen, daemon=True)
        thread.start()
        ready.wait(30)
        sent: dict[int, float] = {}
        with httpx.Client(timeout=30) as c:
            for i in range(samples):
                step = 10_000_000 + i
                sent[step] = time.time()
                self.ingest(c, 0, range(step, step + 1))
                time.sleep(0.02)
        deadline = time.time() + 10
        while time.time() < deadline and len(arrivals) < samples:
            time.sleep(0.05)
        stop.set()
        return [arrivals[s] - sent[s] for s in sent if s in arrivals]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


# -------------------------------------------------------------------------------------------- mlflow
class Mlflow:
    name = "mlflow"

    def __init__(self, workdir: Path, binary: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        store = workdir / "mlflow"
        store.mkdir()
        self.log = open(workdir / "mlflow.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([binary, "server", "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
                                      "--default-artifact-root", str(store / "artifacts"), "--host", "127.0.0.1",
                                      "--port", str(self.port), "--workers", "4"],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_http(f"{self.url}/health", timeout=300)
        self.http = httpx.Client(base_url=self.url, timeout=120)
        self.runs: list[str] = []

    # what MLflow's own client retries (mlflow/utils/request_utils.py); its server answers 503 when loaded
    TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})

    def _post(self, client: httpx.Client, url: str, body: dict) -> httpx.Response:
        for attempt in range(5):  # its workers sometimes drop a connection under load
            try:
                response = client.post(url, json=body)
                response.raise_for_status()
                return response
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                transient = not isinstance(exc, httpx.HTTPStatusError) or exc.response.status_code in self.TRANSIENT
                if attempt == 4 or not transient:
                    raise
                time.sleep(0.5 * (attempt + 1))  # counted in its ingest time, as for a user of its client
        raise AssertionError("unreachable")

    def create_runs(self, n: int) -> None:
        experiment = self._post(self.http, "/api/2.0/mlflow/experiments/create", {"name": "bench"}).json()
        for i in range(n):
            r = self._post(self.http, "/api/2.0/mlflow/runs/create", {"experiment_id": experiment["experiment_id"],
                                                                      "run_name": f"bench-{i}"}).json()
            self.runs.append(r["run"]["info"]["run_id"])

    def ingest(self, client: httpx.Client, run_index: int, steps: range) -> None:
        now = int(time.time() * 1000)
        metrics = [{"key": k, "value": value(run_index, ki, s), "timestamp": now, "step": s}
                   for s in steps for ki, k in enumerate(key_names())]
        self._post(client, f"{self.url}/api/2.0/mlflow/runs/log-batch",
                   {"run_id": self.runs[run_index], "metrics": metrics})

    def chart(self) -> int:
        total = 0
        for run_id in self.runs[:CHART_RUNS]:
            for key in key_names()[:CHART_KEYS]:
                r = self.http.get("/api/2.0/mlflow/metrics/get-history",
                                  params={"run_id": run_id, "metric_key": key, "max_results": 25000}).json()
                total += len(r.get("metrics", []))
        return total

    def stop(self) -> None:
        import signal

        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):  # its own process group (gunicorn workers)
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self.log.close()


# ------------------------------------------------------------------------------------------ workload
def run_workload(target) -> dict:
    target.create_runs(RUNS)
    latencies: list[float] = []
    lock = threading.Lock()

    def client_job(run_index: int) -> None:
        with httpx.Client(timeout=120) as client:
            for start in range(0, STEPS, STEPS_PER_REQUEST):
                t0 = time.perf_counter()
                target.ingest(client, run_index, range(start, start + STEPS_PER_REQUEST))
                with lock:
                    latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(client_job, range(RUNS)))
    elapsed = time.perf_counter() - started
    chart_times, points = [], 0
    for _ in range(5):
        t0 = time.perf_counter()
        points = target.chart()
        chart_times.append(time.perf_counter() - t0)
    result = {"ingest_points_per_s": RUNS * KEYS * STEPS / elapsed, "ingest_seconds": elapsed,
              "request_p50_ms": percentile(latencies, 50) * 1000, "request_p95_ms": percentile(latencies, 95) * 1000,
              "chart_query_ms": statistics.median(chart_times) * 1000, "chart_points": points}
    if isinstance(target, Rlstudio):
        sse = target.sse_latency()
        result["sse_p95_ms"] = percentile(sse, 95) * 1000 if sse else float("nan")
        result["sse_delivered"] = len(sse)
    return result


def main(args: argparse.Namespace) -> None:
    results = {}
    if not args.json:
        print(f"M1: {RUNS} runs x {KEYS} keys x {STEPS} steps, {CLIENTS} clients, {STEPS_PER_REQUEST * KEYS} "
              f"points per request; chart = {CHART_KEYS} keys x {CHART_RUNS} runs, <= {CHART_POINTS} points per series",
              flush=True)
    with tempfile.TemporaryDirectory(prefix="rlstudio-bench-") as tmp:
        workdir = Path(tmp)
        targets = [("rlstudio", lambda: Rlstudio(workdir))]
        if getattr(args, "health", False):  # the cost of judging run health: the same workload without and with,
            KEY_SET["names"] = TRAINING_KEYS  # alternating (a shared machine's load moves between rounds)
            targets = []
            for i in range(args.rounds):
                pair = [(f"no health {i + 1}", lambda i=i: Rlstudio(workdir, {"RLSTUDIO_HEALTH_CHECKS": "false"},
                                                                  f"no-health-{i}")),
                        (f"health {i + 1}", lambda i=i: Rlstudio(workdir, {"RLSTUDIO_HEALTH_CHECKS": "true"},
                                                               f"health-{i}"))]
                targets += pair if i % 2 == 0 else pair[::-1]
        if args.vs_mlflow:
            targets.append(("mlflow", lambda: Mlflow(workdir, args.mlflow)))
        for name, make in targets:
            target = make()
            try:
                results[name] = run_workload(target)
            finally:
                target.stop()
            if not args.json:
                report(name, results[name])
    if getattr(args, "health", False):
        off = statistics.median(r["ingest_seconds"] for name, r in results.items() if name.startswith("no health"))
        on = statistics.median(r["ingest_seconds"] for name, r in results.items() if name.startswith("health"))
        results["health_overhead_pct"] = 100 * (on / off - 1)
        if not args.json:
            print(f"    health: ingest {on:.2f} s with, {off:.2f} s without (medians of {args.rounds} alternating "
                  f"rounds): {results['health_overhead_pct']:+.1f}% ({RUNS} runs x {KEYS} training keys x {STEPS} "
                  "steps)", flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    elif "mlflow" in results:
        ours, theirs = results["rlstudio"], results["mlflow"]
        print(f"    ratio: ingest {ours['ingest_points_per_s'] / theirs['ingest_points_per_s']:.1f}x, chart query "
              f"{theirs['chart_query_ms'] / ours['chart_query_ms']:.1f}x faster")


def report(name: str, r: dict) -> None:
    line = (f"{name:>9}: ingest {r['ingest_points_per_s']:>10,.0f} points/s  request p50 "
            f"{r['request_p50_ms']:7.1f} ms  p95 {r['request_p95_ms']:7.1f} ms  chart query "
            f"{r['chart_query_ms']:8.1f} ms ({r['chart_points']} points)")
    if "sse_p95_ms" in r:
        line += f"  ingest->SSE p95 {r['sse_p95_ms']:.0f} ms"
    print(line, flush=True)

