"""The `dashboard` logger: sends metrics, samples, status and log lines to the rlstudio server over HTTP.

Wiring (the engine never imports `backend`; this module uses only the standard library):

- Run launched by the server as a Ray job: the job's environment carries
  `RLSTUDIO_URL` (server base URL), `RLSTUDIO_RUN_ID`, `RLSTUDIO_INGEST_TOKEN` (this run's own token: it
  can write only to this run) and `RLSTUDIO_SPOOL_DIR`. `DashboardLogger.from_config(cfg)` reads them.
- Run started by hand, like a wandb run: `trainer.logger=['console','dashboard']
  trainer.dashboard_url=http://127.0.0.1:8000` (or `RLSTUDIO_URL`) and no run id: `from_config` creates the
  run on the server (`POST /api/v1/runs` with `launch: false`, experiment = trainer.project_name, name =
  trainer.experiment_name, the resolved config) and logs to it. If the server needs an API token, put it
  in `RLSTUDIO_API_TOKEN`.

Delivery: calls are buffered and sent by one background thread, in order, every <= `flush_interval` s
(1 s) or as soon as `max_points` metric points / `max_samples` samples are waiting; a status call flushes
what came before it. Failed requests are retried with backoff (0.2 s doubling to 10 s); while the server
is unreachable every request goes to a spool file (`<spool_dir>/run-<id>.jsonl`, with a `.offset` file
counting the lines already delivered), which is replayed in order when the server is back -- also by a
later process with the same spool dir, or by hand: `python -m engine.loggers.dashboard SPOOL_FILE`.
Exactly once: the server upserts points on (run, key, step), samples on (run, split, step, sample_index)
and log lines on (run, source, seq), so a request sent twice (response lost, replay after a crash) stores
its rows once. Requests the server refuses for good (4xx other than 408/429) are dropped with a warning.

Heartbeat (`log_phase`, engine/trainer/heartbeat.py): the phase the trainer enters goes on the status route as
`{"status": "running", "error": null, "fields": {"heartbeat": {"phase": "gen", "step": 3, "time": <unix s>,
"sent": <unix s>}}}` (`step`: the step being worked on, `time`: when the phase began, `sent`: when the request left,
both the engine's clock; the server uses only their difference). It is sent at once, not
buffered; one not yet sent when the next comes is replaced by it, and none is spooled (only the live phase means
anything), so a run sends at most one small request per phase change.
"""
from __future__ import annotations

import collections
import http.client
import json
import math
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from engine.loggers.base import Logger

SAMPLE_FIELDS = ("step", "split", "sample_index", "prompt_index", "group_uid", "prompt", "response", "score",
                 "reward", "ground_truth", "data_source")
TOKEN_ARRAYS = ("tokens", "old_log_probs", "ref_log_probs", "advantages", "values")
# each token's policy version (over `tokens`) and the answer's oldest/newest version and verl's staleness
VERSIONS = ("policy_versions", "policy_version_min", "policy_version_max", "staleness", "staleness_worst")
# multi-turn rollouts: the conversation and which tokens the loss saw (the server derives the turn count)
TRAJECTORY = ("turns", "loss_mask")
RETRYABLE = {408, 429}


class ServerRefused(Exception):
    """The server answered with a 4xx that retrying will not fix."""


def _dumps(body: dict) -> bytes:
    """The request body: orjson when installed (a step's samples are megabytes of floats), else json."""
    try:
        import orjson
    except ImportError:
        return json.dumps(body).encode()
    return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)


def _plain(value: Any) -> Any:
    """Tensors / numpy values / nested containers -> JSON-safe Python (non-finite floats -> None)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    elif hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        try:  # plain numbers, all finite (their sum is): nothing to convert, one C loop instead of a call each
            if math.isfinite(sum(value)) and set(map(type, value)) <= {int, float}:
                return list(value)
        except (TypeError, OverflowError):
            if set(map(type, value)) == {str}:  # e.g. the tokens' texts
                return list(value)
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def _metric_value(value: Any) -> Any:
    value = float(value.item() if hasattr(value, "item") else value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


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


class DashboardLogger(Logger):
    def __init__(self, url: str, run_id: int | str, token: str | None = None, spool_dir: str | None = None, *,
                 flush_interval: float = 1.0, max_points: int = 1000, max_samples: int = 64,
                 request_timeout: float = 10.0, close_timeout: float = 60.0, quiet: bool = False):
        self.url = url.rstrip("/")
        self.run_id = int(run_id)
        self.token = token
        self.flush_interval = flush_interval
        self.max_points = max_points
        self.max_samples = max_samples
        self.request_timeout = request_timeout
        self.close_timeout = close_timeout
        self.quiet = quiet
        spool_dir = spool_dir or os.path.join(os.getcwd(), ".rlstudio-spool")
        self.spool = Spool(os.path.join(spool_dir, f"run-{self.run_id}.jsonl"))
        self._cond = threading.Condition()
        self._points: list[dict] = []
        self._samples: list[dict] = []
        self._lines: list[dict] = []
        self._outbox: collections.deque[dict] = collections.deque()
        self._sample_counters: dict[tuple[str, int], int] = {}
        self._line_seq = 0
        self._last_seal = time.monotonic()
        self._closing = False
        self._closed = False
        self.delivered = 0  # requests the server acknowledged
        self._thread = threading.Thread(target=self._run, name="rlstudio-dashboard-logger", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, cfg: Any) -> DashboardLogger:
        """From the job's environment (server-launched run), else create the run on `trainer.dashboard_url`."""
        config = cfg.model_dump(mode="json") if hasattr(cfg, "model_dump") else dict(cfg)
        trainer = config.get("trainer") or {}
        return cls.from_env_or_config(trainer, config)

    @classmethod
    def from_env_or_config(cls, trainer: dict, config: dict | None = None) -> DashboardLogger:
        url = os.environ.get("RLSTUDIO_URL") or trainer.get("dashboard_url")
        run_id = os.environ.get("RLSTUDIO_RUN_ID")
        local_dir = os.path.expanduser(trainer.get("default_local_dir") or ".")
        spool_dir = os.environ.get("RLSTUDIO_SPOOL_DIR") or os.path.join(local_dir, "dashboard_spool")
        if run_id:
            if not url:
                raise ValueError("dashboard logger: RLSTUDIO_RUN_ID is set but not RLSTUDIO_URL.")
            return cls(url, run_id, os.environ.get("RLSTUDIO_INGEST_TOKEN"), spool_dir)
        url = trainer.get("dashboard_url") or url
        if not url:
            raise ValueError("trainer.logger includes 'dashboard' but no server is given: set "
                             "trainer.dashboard_url=http://127.0.0.1:8000 (or RLSTUDIO_URL).")
        run_id, token = create_run(url, trainer, config or {})
        return cls(url, run_id, token, spool_dir)

    # ----------------------------------------------------------------------------------- Logger calls
    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        now = time.time()
        points = []
        for key, value in metrics.items():
            try:
                points.append({"key": str(key), "step": int(step), "value": _metric_value(value), "wall_time": now})
            except (TypeError, ValueError):
                continue  # not a number (e.g. a string metric): the dashboard charts numbers only
        with self._cond:
            self._points.extend(points)
            if len(self._points) >= self.max_points:
                self._seal()
            self._cond.notify()

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        converted = [self._sample(step, s) for s in samples]
        with self._cond:
            self._samples.extend(converted)
            if len(self._samples) >= self.max_samples:
                self._seal()
            self._cond.notify()

    def log_lines(self, lines: list[str], source: str = "engine") -> None:
        now = time.time()
        with self._cond:
            for text in lines:
                self._lines.append({"source": source, "seq": self._line_seq, "text": str(text), "time": now})
                self._line_seq += 1
            self._cond.notify()

    def log_phase(self, phase: str, step: int, detail: str | None = None) -> None:
        beat = {"phase": str(phase), "step": int(step), "time": time.time()}
        if detail is not None:  # the async trainer's wait_rollout: what the rollout thread is doing
            beat["detail"] = str(detail)
        body = {"status": "running", "error": None, "fields": {"heartbeat": beat}}
        request = {"path": f"/api/v1/runs/{self.run_id}/status", "body": body, "heartbeat": True}
        with self._cond:
            if self._outbox and self._outbox[-1].get("heartbeat"):
                self._outbox[-1] = request  # the newer phase replaces one not yet sent
            else:
                self._outbox.append(request)
            self._cond.notify()

    def log_status(self, status: str, **fields: Any) -> None:
        body = {"status": status, "error": fields.pop("error", None), "fields": _plain(fields)}
        if body["error"] is not None:
            body["error"] = str(body["error"])
        with self._cond:
            self._seal()
            self._outbox.append({"path": f"/api/v1/runs/{self.run_id}/status", "body": body})
            self._cond.notify()

    def flush(self, timeout: float = 30.0) -> bool:
        """Send everything buffered; True when the server has it (False: still queued or spooled)."""
        with self._cond:
            self._seal()
            self._cond.notify()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._cond:
                if not self._outbox and not self._busy and not self.spool.pending():
                    return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_deadline = time.monotonic() + max(self.close_timeout - 2.0, 0.0)
        with self._cond:
            self._seal()
            self._closing = True
            self._cond.notify()
        self._thread.join(self.close_timeout)
        with self._cond:
            left = _spoolable(self._outbox)
            self._outbox.clear()
        if left:
            self.spool.append(left)
        pending = len(self.spool.pending())
        if pending:
            self._say(f"server {self.url} unreachable: {pending} request(s) kept in {self.spool.path}; they are "
                      f"sent when a logger with the same spool dir starts, or by `python -m "
                      f"engine.loggers.dashboard {self.spool.path}`.")

    # -------------------------------------------------------------------------------------- internals
    _busy = False
    _close_deadline = 0.0

    @property
    def spooled(self) -> int:
        """Requests that went through the spool file (server unreachable)."""
        return self.spool.appended

    def _sample(self, step: int, sample: dict[str, Any]) -> dict:
        sample = dict(sample)
        split = str(sample.get("split") or "train")
        step = int(sample.get("step", step))
        if "sample_index" in sample:
            index = int(sample["sample_index"])
        else:
            index = self._sample_counters.get((split, step), 0)
            self._sample_counters[(split, step)] = index + 1
        out: dict[str, Any] = {"step": step, "split": split, "sample_index": index}
        for name in SAMPLE_FIELDS[3:]:
            if name in sample:
                value = _plain(sample[name])
                out[name] = value if name not in ("group_uid", "ground_truth", "data_source") or value is None \
                    else str(value)
        for name in TOKEN_ARRAYS + TRAJECTORY + VERSIONS:
            if sample.get(name) is not None:
                out[name] = _plain(sample[name])
        if "prompt" in out and out["prompt"] is None:
            out["prompt"] = ""
        if "response" in out and out["response"] is None:
            out["response"] = ""
        skip = set(SAMPLE_FIELDS) | set(TOKEN_ARRAYS) | set(TRAJECTORY) | set(VERSIONS) | ({"num_turns"} if "turns" in out else set())
        extras = {k: v for k, v in sample.items() if k not in skip}
        out["extras"] = _plain(extras)
        return out

    def _seal(self) -> None:
        """Turn what is buffered into requests, in call order (caller holds the lock)."""
        base = f"/api/v1/runs/{self.run_id}"
        while self._points:
            chunk, self._points = self._points[:self.max_points], self._points[self.max_points:]
            self._outbox.append({"path": f"{base}/metrics", "body": {"points": chunk}})
        while self._samples:
            chunk, self._samples = self._samples[:self.max_samples], self._samples[self.max_samples:]
            self._outbox.append({"path": f"{base}/samples", "body": {"samples": chunk}})
        by_source: dict[str, list[dict]] = {}
        for line in self._lines:
            by_source.setdefault(line["source"], []).append({k: line[k] for k in ("seq", "text", "time")})
        for source, lines in by_source.items():
            for i in range(0, len(lines), 2000):
                self._outbox.append({"path": f"{base}/logs", "body": {"source": source, "lines": lines[i:i + 2000]}})
        self._lines = []
        self._last_seal = time.monotonic()

    def _run(self) -> None:
        backoff = 0.0
        while True:
            with self._cond:
                if not self._outbox and not self._closing and not self.spool.pending():
                    wait = self.flush_interval - (time.monotonic() - self._last_seal)
                    if wait > 0:
                        self._cond.wait(wait)
                if time.monotonic() - self._last_seal >= self.flush_interval or self._closing:
                    self._seal()
                batch = list(self._outbox)
                self._outbox.clear()
                closing = self._closing
                self._busy = bool(batch)
            try:
                offline = bool(self.spool.pending())
                if offline and batch:
                    self.spool.append(_spoolable(batch))  # keep the order: older spooled requests go first
                    batch = []
                for i, request in enumerate(batch):
                    if request.get("heartbeat"):  # how long the phase had run when sent: the server's stall check
                        request["body"]["fields"]["heartbeat"]["sent"] = time.time()  # trusts no clock but its own
                    if not self._send_with_retries(request, attempts=1 if request.get("heartbeat") else 3):
                        self.spool.append(_spoolable(batch[i:]))
                        offline = True
                        break
                if offline:
                    if self._drain_spool():
                        backoff = 0.0
                    else:
                        backoff = min(max(backoff * 2, 0.5), 10.0)
                        if closing and time.monotonic() > self._close_deadline:
                            return
                        with self._cond:
                            self._cond.wait(backoff)
                        continue
            finally:
                with self._cond:
                    self._busy = False
            if closing:
                with self._cond:
                    if not self._outbox and not self._points and not self._samples and not self._lines:
                        return

    def _drain_spool(self) -> bool:
        for request in self.spool.pending():
            if not self._send_with_retries(request, attempts=1):
                return False
            self.spool.advance()
        self.spool.clear()
        return True

    def _send_with_retries(self, request: dict, attempts: int) -> bool:
        delay = 0.2
        for attempt in range(attempts):
            try:
                self._post(request["path"], request["body"])
                self.delivered += 1
                return True
            except ServerRefused as exc:
                self._say(f"server refused {request['path']}: {exc}; dropped.")
                return True  # retrying cannot fix it; don't block everything behind it
            except (urllib.error.URLError, OSError, TimeoutError, RuntimeError):
                if attempt + 1 < attempts:
                    time.sleep(delay)
                    delay = min(delay * 2, 10.0)
            except Exception as exc:  # noqa: BLE001 - unforeseen: keep the request (spooled), never kill the thread
                self._say(f"sending {request['path']} failed ({type(exc).__name__}: {exc}); kept for a retry.")
                return False
        return False

    def _post(self, path: str, body: dict) -> dict:
        return _post_json(self.url + path, body, self.token, self.request_timeout)

    def _say(self, message: str) -> None:
        if not self.quiet:
            print(f"[rlstudio dashboard] {message}", file=sys.stderr, flush=True)


def _spoolable(requests) -> list[dict]:
    """What goes to the spool file: everything but heartbeats, which say only what the run is doing now."""
    return [r for r in requests if not r.get("heartbeat")]


def _post_json(url: str, body: dict, token: str | None, timeout: float) -> dict:
    data = _dumps(body)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode() or "{}"
            return json.loads(text)
    except http.client.HTTPException as exc:
        # e.g. IncompleteRead: the server died mid-answer; it may have stored the request (re-sending is safe)
        raise ConnectionError(f"{type(exc).__name__}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise RuntimeError(f"unreadable answer from {url}: {exc}") from None
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        if 400 <= exc.code < 500 and exc.code not in RETRYABLE:
            raise ServerRefused(f"HTTP {exc.code}: {detail}") from None
        raise RuntimeError(f"HTTP {exc.code}: {detail}") from None


def create_run(url: str, trainer: dict, config: dict, attempts: int = 5) -> tuple[int, str]:
    """Register a run started by hand; returns (run id, its ingest token)."""
    body = {"experiment_name": trainer.get("project_name") or "default", "name": trainer.get("experiment_name") or "",
            "config": config, "launch": False, "tags": ["cli"]}
    api_token = os.environ.get("RLSTUDIO_API_TOKEN")
    delay, last = 0.5, None
    for _ in range(attempts):
        try:
            created = _post_json(url.rstrip("/") + "/api/v1/runs", body, api_token, 30.0)
            print(f"[rlstudio dashboard] run {created['id']}: {url.rstrip('/')}/runs/{created['id']}", flush=True)
            return int(created["id"]), created.get("ingest_token")
        except ServerRefused as exc:
            raise ValueError(f"dashboard logger: the server at {url} refused the run: {exc}") from None
        except (urllib.error.URLError, OSError, RuntimeError) as exc:
            last = exc
            time.sleep(delay)
            delay *= 2
    raise ConnectionError(f"dashboard logger: cannot reach the rlstudio server at {url} ({last}). Start it with "
                          "`python -m backend`, or drop 'dashboard' from trainer.logger.")


def replay(spool_file: str, url: str | None = None, token: str | None = None) -> int:
    """Send a spool file's undelivered requests (in order); returns how many were sent."""
    url = url or os.environ.get("RLSTUDIO_URL") or "http://127.0.0.1:8000"
    token = token or os.environ.get("RLSTUDIO_INGEST_TOKEN") or os.environ.get("RLSTUDIO_API_TOKEN")
    spool = Spool(spool_file)
    sent = 0
    for request in spool.pending():
        try:
            _post_json(url.rstrip("/") + request["path"], request["body"], token, 30.0)
        except ServerRefused as exc:
            print(f"refused, skipped: {request['path']}: {exc}", file=sys.stderr)
        spool.advance()
        sent += 1
    spool.clear()
    return sent


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Replay a dashboard logger spool file to the server.")
    parser.add_argument("spool_file")
    parser.add_argument("--url", help="server URL (default RLSTUDIO_URL or http://127.0.0.1:8000)")
    args = parser.parse_args()
    print(f"sent {replay(args.spool_file, args.url)} request(s)")
