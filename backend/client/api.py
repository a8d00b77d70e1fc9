"""`Client`: rlstudio's REST API (/api/v1) from Python, typed with the server's own Public models."""
from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from typing_extensions import Self

from backend.models import (
    ArtifactPublic,
    ExperimentPublic,
    MetricSeries,
    RunCreated,
    RunHealth,
    RunPublic,
    RunStatus,
    SamplePublic,
    SampleRow,
    SampleStep,
)
from backend.models.run_import import RunImported

DEFAULT_URL = "http://127.0.0.1:8000"
FAILED = (RunStatus.failed, RunStatus.lost)
TERMINAL = (RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled, RunStatus.lost)
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class ApiError(Exception):
    """A request the server refused: `status_code`, `detail` (its answer), `field` (the key or parameter it
    names, e.g. 'actor_rollout_ref.actor.optim.lr' or 'experiment_id', when it names one)."""

    def __init__(self, status_code: int, method: str, path: str, detail: Any):
        self.status_code, self.method, self.path, self.detail = status_code, method, path, detail
        self.field: str | None = None
        if isinstance(detail, list) and detail and isinstance(detail[0], dict):  # 422: [{loc, msg, type, field?}]
            first = detail[0]
            loc = [str(part) for part in first.get("loc", [])]
            self.field = first.get("field") or ".".join(loc[1:] if loc[:1] in (["body"], ["query"], ["path"])
                                                        else loc) or None
            message = "; ".join(str(d.get("msg", d)) for d in detail if isinstance(d, dict))
        else:
            message = str(detail)
        where = f" [{self.field}]" if self.field and self.field not in message else ""
        super().__init__(f"{status_code} {method} {path}{where}: {message}")


class RunFailed(Exception):
    """`wait` found a run failed or lost: `run` holds its `error` and `log_tail`."""

    def __init__(self, run: RunPublic):
        self.run = run
        tail = "\n".join((run.log_tail or "").strip().splitlines()[-10:])
        super().__init__(f"run {run.id} ({run.name or 'unnamed'}) {run.status.value}: "
                         f"{(run.error or 'no error message').strip()}" + (f"\n--- log tail ---\n{tail}" if tail else ""))


class WaitTimeout(TimeoutError):
    """`wait` ran out of time; `runs` holds each run's last state."""

    def __init__(self, runs: list[RunPublic], timeout: float):
        self.runs = runs
        pending = ", ".join(f"{r.id} {r.status.value}" for r in runs if r.status not in TERMINAL)
        super().__init__(f"runs still active after {timeout:g} s: {pending}")


def _checked(response: httpx.Response, method: str, path: str) -> httpx.Response:
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except (ValueError, AttributeError):
            detail = response.text
        raise ApiError(response.status_code, method, path, detail)
    return response


def _number(value: Any) -> float | None:
    return _NON_FINITE.get(value, value) if isinstance(value, str) else value


class Client:
    """`Client(url, token)`: url defaults to $RLSTUDIO_URL (else http://127.0.0.1:8000), the token to
    $RLSTUDIO_API_TOKEN (needed only by a server that has one). Every refused request raises `ApiError`."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 60.0):
        self.url = (url or os.environ.get("RLSTUDIO_URL") or DEFAULT_URL).rstrip("/")
        token = token if token is not None else os.environ.get("RLSTUDIO_API_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=f"{self.url}/api/v1", headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs) -> httpx.Response:
        return _checked(self.http.request(method, path, **kwargs), method, path)

    def _get(self, path: str, **params) -> Any:
        return self._request("GET", path, params={k: v for k, v in params.items() if v is not None}).json()

    def _paged(self, path: str, params: dict, limit: int | None, page: int = 1000) -> list[dict]:
        """Every row (or the first `limit`) of a `{data, count}` list, a page at a time."""
        rows: list[dict] = []
        while limit is None or len(rows) < limit:
            size = page if limit is None else min(page, limit - len(rows))
            body = self._get(path, **params, skip=len(rows), limit=size)
            rows += body["data"]
            if not body["data"] or len(rows) >= body["count"]:
                break
        return rows

    # experiments -------------------------------------------------------------------------------------------
    def experiments(self, q: str | None = None) -> list[ExperimentPublic]:
        return [ExperimentPublic.model_validate(e) for e in self._paged("/experiments", {"q": q}, None)]

    def experiment(self, experiment: int | str) -> ExperimentPublic:
        """By id, or by exact name (ApiError 404 when there is none)."""
        if isinstance(experiment, int):
            return ExperimentPublic.model_validate(self._get(f"/experiments/{experiment}"))
        for found in self.experiments(q=experiment):
            if found.name == experiment:
                return found
        raise ApiError(404, "GET", "/experiments", f"name: no experiment named '{experiment}'.")

    def create_experiment(self, name: str, description: str | None = None) -> ExperimentPublic:
        body = self._request("POST", "/experiments", json={"name": name, "description": description}).json()
        return ExperimentPublic.model_validate(body)

    def delete_experiment(self, experiment: int | str) -> None:
        self._request("DELETE", f"/experiments/{self.experiment(experiment).id}")

    # runs --------------------------------------------------------------------------------------------------
    def launch(self, overrides: Sequence[str] = (), *, preset: str | None = None, config: dict | None = None,
               name: str = "", experiment: int | str | None = None, tags: Sequence[str] = (), notes: str = "",
               launch: bool = True) -> RunCreated:
        """A new run: `preset` (engine/configs/<preset>.yaml) under verl-style `overrides` ("key=value") and/or
        a nested `config`; in `experiment` (an id, or a name made when new; default 'default'). The server
        validates it with the engine's schema (a bad key: ApiError naming it) and queues it. `launch=False`
        records a run driven from outside; its `ingest_token` comes back once."""
        body: dict[str, Any] = {"name": name, "preset": preset, "config": config or {}, "overrides": list(overrides),
                                "tags": list(tags), "notes": notes, "launch": launch}
        if isinstance(experiment, int):
            body["experiment_id"] = experiment
        elif experiment is not None:
            body["experiment_name"] = experiment
        return RunCreated.model_validate(self._request("POST", "/runs", json=body).json())

    def run(self, run_id: int) -> RunPublic:
        return RunPublic.model_validate(self._get(f"/runs/{run_id}"))

    def runs(self, *, experiment: int | str | None = None, status: str | Iterable[str] | None = None,
             tag: str | Iterable[str] | None = None, q: str | None = None, config: dict[str, Any] | None = None,
             parent_id: int | None = None, sort: str = "-created_at", limit: int | None = None) -> list[RunPublic]:
        """Runs matching every filter: `status` ('running' or several), `tag` (all of them), `q` (name
        contains), `config` ({'algorithm.adv_estimator': 'grpo'}), newest first unless `sort` says otherwise."""
        params: dict[str, Any] = {"q": q, "parent_id": parent_id, "sort": sort,
                                  "status": [status] if isinstance(status, str) else status,
                                  "tag": [tag] if isinstance(tag, str) else tag,
                                  "config": [f"{k}={v}" for k, v in (config or {}).items()] or None}
        if experiment is not None:
            params["experiment_id"] = self.experiment(experiment).id
        return [RunPublic.model_validate(r) for r in self._paged("/runs", params, limit)]

    def update_run(self, run_id: int, *, name: str | None = None, tags: Sequence[str] | None = None,
                   notes: str | None = None) -> RunPublic:
        body = {k: v for k, v in {"name": name, "tags": None if tags is None else list(tags), "notes": notes}.items()
                if v is not None}
        return RunPublic.model_validate(self._request("PATCH", f"/runs/{run_id}", json=body).json())

    def cancel(self, run_id: int) -> RunPublic:
        return RunPublic.model_validate(self._request("POST", f"/runs/{run_id}/cancel").json())

    def resume(self, run_id: int) -> RunPublic:
        """A new run continuing `run_id` from its last checkpoint."""
        return RunPublic.model_validate(self._request("POST", f"/runs/{run_id}/resume").json())

    def fork(self, run_id: int, overrides: Sequence[str] = (), *, config: dict | None = None, name: str | None = None,
             tags: Sequence[str] | None = None, launch: bool = True) -> RunCreated:
        """A new run with `run_id`'s config plus these edits."""
        body = {"overrides": list(overrides), "config": config or {}, "name": name, "launch": launch,
                "tags": None if tags is None else list(tags)}
        return RunCreated.model_validate(self._request("POST", f"/runs/{run_id}/fork", json=body).json())

    def delete_run(self, run_id: int) -> None:
        self._request("DELETE", f"/runs/{run_id}")

    def wait(self, runs: int | RunPublic | Iterable[int | RunPublic], *, timeout: float | None = None,
             poll: float = 1.0, check: bool = True) -> Any:
        """Until every run is succeeded, failed, cancelled or lost; returns the run (or the list, in order).
        With `check` a failed or lost run raises `RunFailed` (its error and log tail); past `timeout` seconds
        `WaitTimeout`."""
        single = isinstance(runs, (int, RunPublic))
        ids = [r.id if isinstance(r, RunPublic) else int(r) for r in ([runs] if single else runs)]
        deadline = None if timeout is None else time.monotonic() + timeout
        latest: dict[int, RunPublic] = {}
        while True:
            for run_id in ids:
                if run_id not in latest or latest[run_id].status not in TERMINAL:
                    latest[run_id] = self.run(run_id)
                    if check and latest[run_id].status in FAILED:
                        raise RunFailed(latest[run_id])
            done = [latest[i] for i in ids]
            if all(r.status in TERMINAL for r in done):
                return done[0] if single else done
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(done, timeout)
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))

    def health(self, run: int | RunPublic) -> RunHealth:
        """The run's health as the server judges it: `status` (ok / warning / error), each alarm that fired (firing
        since `since_step` or cleared at `cleared_step`, its `values`) and the `thresholds`."""
        run_id = run.id if isinstance(run, RunPublic) else int(run)
        return RunHealth.model_validate(self._get(f"/runs/{run_id}/health"))

    # metrics -----------------------------------------------------------------------------------------------
    def metric_keys(self, run_id: int) -> list[str]:
        return self._get(f"/runs/{run_id}/metrics/keys")["data"]

    def latest(self, run_id: int, keys: Sequence[str] | None = None) -> dict[str, float]:
        """The newest value of every key (or of `keys`)."""
        body = self._get(f"/runs/{run_id}/metrics/latest", key=list(keys) if keys else None)
        return {m["key"]: _number(m["value"]) for m in body["data"]}

    def metrics(self, run_id: int | Sequence[int], keys: Sequence[str] | None = None, *, step_min: int | None = None,
                step_max: int | None = None, max_points: int = 100_000) -> list[MetricSeries]:
        """Series (steps, values, wall_times) of one run's keys (default every key) or several runs' `keys`.
        A series longer than `max_points` comes downsampled (each bucket's min and max; `downsampled` says so):
        `download_metrics` has every point."""
        common = {"step_min": step_min, "step_max": step_max, "max_points": max_points}
        if isinstance(run_id, int):
            body = self._get(f"/runs/{run_id}/metrics", key=list(keys) if keys else None, **common)
        else:
            if not keys:
                raise ValueError("keys: name the metrics to read from several runs")
            body = self._get("/metrics", run_id=list(run_id), key=list(keys), **common)
        series = [MetricSeries.model_validate(s) for s in body["data"]]
        for s in series:
            s.values = [_number(v) for v in s.values]
        return series

    def metric_rows(self, run_id: int | Sequence[int], keys: Sequence[str] | None = None, **kwargs) -> list[dict]:
        """The same as `metrics`, one dict per point: run_id, key, step, value, wall_time."""
        return [{"run_id": s.run_id, "key": s.key, "step": step, "value": value, "wall_time": wall}
                for s in self.metrics(run_id, keys, **kwargs) for step, value, wall in zip(s.steps, s.values,
                                                                                             s.wall_times)]

    def metrics_df(self, run_id: int | Sequence[int], keys: Sequence[str] | None = None, *, wide: bool = True,
                   **kwargs):
        """A pandas DataFrame: `wide` = one row per step (and run), one column per key; else `metric_rows`."""
        import pandas as pd

        frame = pd.DataFrame(self.metric_rows(run_id, keys, **kwargs),
                             columns=["run_id", "key", "step", "value", "wall_time"])
        if not wide:
            return frame
        index = ["step"] if isinstance(run_id, int) else ["run_id", "step"]
        table = frame.set_index([*index, "key"])["value"].unstack("key")  # (run, key, step) is unique
        table.columns.name = None
        return table

    # samples -----------------------------------------------------------------------------------------------
    def sample_steps(self, run_id: int) -> list[SampleStep]:
        return [SampleStep.model_validate(s) for s in self._get(f"/runs/{run_id}/samples/steps")["data"]]

    def samples(self, run_id: int, *, step: int | None = None, split: str | None = None, limit: int | None = None,
                **filters) -> list[SamplePublic]:
        """Answers with their prompts and per-token arrays. Filters: prompt_index, group_uid, data_source, q
        (text contains), min_score, max_score, order ('step', '-score', ...)."""
        params = {"step": step, "split": split, **filters}
        return [SamplePublic.model_validate(s) for s in self._paged(f"/runs/{run_id}/samples", params, limit)]

    def sample_rows(self, run_id: int, *, steps: Sequence[int] | None = None, split: str | None = None,
                    limit: int = 50_000, **filters) -> list[SampleRow]:
        """Light rows (score, mean advantage, length, first line; no prompt, no token arrays)."""
        body = self._get(f"/runs/{run_id}/samples/rows", step=list(steps) if steps else None, split=split,
                         limit=limit, **filters)
        return [SampleRow.model_validate(r) for r in body["data"]]

    def samples_df(self, run_id: int, **kwargs):
        """`samples` as a pandas DataFrame, one row per answer."""
        import pandas as pd

        return pd.DataFrame([s.model_dump() for s in self.samples(run_id, **kwargs)])

    # downloads ---------------------------------------------------------------------------------------------
    def download_metrics(self, run_id: int, path: str | Path, *, format: str = "csv", layout: str = "wide") -> Path:
        """Every point of the run to a csv or parquet file (`layout` wide: a column per key; long: a row per
        point)."""
        return self._save(f"/runs/{run_id}/metrics/export", path, {"format": format, "layout": layout})

    def download_samples(self, run_id: int, path: str | Path, *, format: str = "jsonl",
                         steps: Sequence[int] | None = None, **filters) -> Path:
        """The run's samples matching the filters (split, prompt_index, data_source, q, min_score, max_score) to
        a jsonl, csv or parquet file."""
        return self._save(f"/runs/{run_id}/samples/export", path,
                          {"format": format, "step": list(steps) if steps else None, **filters})

    def files(self, run_id: int) -> list[ArtifactPublic]:
        """The run's checkpoints, exported model and other files."""
        return [ArtifactPublic.model_validate(a) for a in self._get(f"/runs/{run_id}/files")["data"]]

    def download_file(self, run_id: int, file: str, path: str | Path) -> Path:
        return self._save(f"/runs/{run_id}/files/{file}", path, {})

    def _save(self, route: str, path: str | Path, params: dict) -> Path:
        path = Path(path)
        params = {k: v for k, v in params.items() if v is not None}
        with self.http.stream("GET", route, params=params) as response:
            if response.status_code >= 400:
                response.read()
                _checked(response, "GET", route)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as out:
                out.writelines(response.iter_bytes())
        return path

    # imports -----------------------------------------------------------------------------------------------
    def import_verl(self, metrics: str | Path, *, config: str | Path | None = None,
                    rollout: Iterable[str | Path] = (), validation: Iterable[str | Path] = (),
                    experiment: str | None = None, name: str | None = None, tags: Sequence[str] = (),
                    notes: str | None = None) -> RunImported:
        """A verl run as a new run: its file-logger JSONL, its Hydra config and its generation dumps
        (docs/import-runs.md). ApiError names the field and the file's line that is not verl's shape."""
        return self._import("/imports/verl", [("metrics", metrics), ("config", config)]
                            + [("rollout", p) for p in rollout] + [("validation", p) for p in validation],
                            experiment=experiment, name=name, tags=tags, notes=notes)

    def import_tensorboard(self, events: Iterable[str | Path], *, experiment: str | None = None,
                           name: str | None = None, tags: Sequence[str] = (), notes: str | None = None) -> RunImported:
        """A run from TensorBoard event files (verl's `tensorboard` logger, TRL's default): every scalar a metric."""
        return self._import("/imports/tensorboard", [("events", p) for p in events],
                            experiment=experiment, name=name, tags=tags, notes=notes)

    def _import(self, route: str, parts: list[tuple[str, str | Path | None]], *, tags: Sequence[str],
                **fields: str | None) -> RunImported:
        with ExitStack() as stack:  # the files are streamed from disk, not read into memory first
            files = [(field, (Path(path).name, stack.enter_context(open(path, "rb"))))
                     for field, path in parts if path is not None]
            data = {k: v for k, v in fields.items() if v is not None}
            if tags:
                data["tags"] = list(tags)
            return RunImported.model_validate(self._request("POST", route, files=files, data=data).json())

    # config ------------------------------------------------------------------------------------------------
    def presets(self) -> list[str]:
        return [p["name"] for p in self._get("/config/presets")["data"]]

    def validate(self, overrides: Sequence[str] = (), *, preset: str | None = None,
                 config: dict | None = None) -> dict:
        """The resolved config the server would run (nothing is created), or ApiError naming the bad key."""
        body = {"preset": preset, "config": config or {}, "overrides": list(overrides)}
        return self._request("POST", "/config/validate", json=body).json()["resolved_config"]
