from __future__ import annotations

import re
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from pydantic import StringConstraints, WithJsonSchema
from starlette.concurrency import run_in_threadpool

from backend.api.deps import IngestSessionDep, SessionDep, SettingsDep, get_run_or_404
from backend.api.errors import ErrorMessage, unprocessable
from backend.api.routes.run_health import stop_asked, stop_job
from backend.models import IngestResult, LatestMetrics, MetricKeys, MetricSeriesList, MetricsIngest
from backend.services import metrics

router = APIRouter(tags=["metrics"])
ingest_router = APIRouter(tags=["metrics"])  # authenticated by the run's ingest token or the API token

MaxPoints = Annotated[int | None, Query(ge=2, le=100_000, description=(
    "downsample each series to at most this many points, keeping every bucket's min and max"))]
WallTimes = Annotated[bool, Query(description=(
    "false: every series' `wall_times` comes back empty (a chart on a step axis has no use for them; they are "
    "about a third of the response)"))]


@ingest_router.post("/runs/{run_id}/metrics", response_model=IngestResult,
                    responses={413: {"model": ErrorMessage,
                                     "description": "more points than RLSTUDIO_MAX_METRIC_POINTS_PER_REQUEST "
                                                    "(default 10,000) in one request"}})
async def ingest_metrics(request: Request, ingest: IngestSessionDep, settings: SettingsDep, body: MetricsIngest):
    """Batch ingest, idempotent: a point is keyed by (run, key, step) and re-sending it overwrites it.
    Send `points` ([{key, step, value, wall_time?}]) and/or the columnar `series`
    ([{key, steps, values, wall_times?}]).
    At most RLSTUDIO_MAX_METRIC_POINTS_PER_REQUEST points (default 10,000) per request, else 413."""
    if body.size() > settings.max_metric_points_per_request:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                            f"points: {body.size()} points in one request; the maximum is "
                            f"{settings.max_metric_points_per_request}. Split the batch.")
    session, run = ingest
    accepted = await run_in_threadpool(metrics.ingest, session=session, run=run, body=body)
    await stop_job(request, stop_asked(session))  # the run's health rule cancelled it: its Ray job goes too
    return IngestResult(accepted=accepted)


@router.get("/runs/{run_id}/metrics", response_model=MetricSeriesList)
def list_run_metrics(session: SessionDep, run_id: int,
                key: Annotated[list[str] | None, Query(description="keys; default all")] = None,
                step_min: Annotated[int | None, Query(ge=0)] = None,
                step_max: Annotated[int | None, Query(ge=0)] = None,
                max_points: MaxPoints = 1000, wall_times: WallTimes = True):
    """This run's series: one entry per key with steps, values, wall times."""
    get_run_or_404(session, run_id)
    keys = key or metrics.keys(session=session, run_ids=[run_id])
    data = metrics.series(session=session, run_ids=[run_id], key_list=keys, step_min=step_min, step_max=step_max,
                          max_points=max_points, wall_times=wall_times)
    return MetricSeriesList(data=data, count=len(data))


@router.get("/runs/{run_id}/metrics/keys", response_model=MetricKeys)
def list_run_metric_keys(session: SessionDep, run_id: int):
    get_run_or_404(session, run_id)
    data = metrics.keys(session=session, run_ids=[run_id])
    return MetricKeys(data=data, count=len(data))


@router.get("/runs/{run_id}/metrics/latest", response_model=LatestMetrics)
def get_latest_metrics(session: SessionDep, run_id: int, key: Annotated[list[str] | None, Query()] = None):
    """The newest value of every key (or of the keys asked for)."""
    get_run_or_404(session, run_id)
    data = metrics.latest(session=session, run_id=run_id, key_list=key)
    return LatestMetrics(data=data, count=len(data))


@router.get("/runs/{run_id}/metrics/export", responses={200: {"content": {"text/csv": {},
                                                                      "application/vnd.apache.parquet": {}}}})
def export_metrics(session: SessionDep, run_id: int, format: Literal["csv", "parquet"] = "csv",
                   layout: Literal["wide", "long"] = "wide"):
    """Every point of the run: `wide` = one row per step, one column per key; `long` = step,key,value,wall_time."""
    run = get_run_or_404(session, run_id)
    body = metrics.export(session=session, run_id=run_id, fmt=format, layout=layout)
    media = "text/csv" if format == "csv" else "application/vnd.apache.parquet"
    filename = f"run-{run.id}-metrics.{format}"
    return Response(body, media_type=media, headers={"Content-Disposition": f'attachment; filename="{filename}"'})


_NESTED_QUANTIFIER = re.compile(r"\([^)]*[*+}][^)]*\)\s*[*+{]")


@router.get("/metrics", response_model=MetricSeriesList)
def query_metrics(session: SessionDep,
                  run_id: Annotated[list[int], Query(min_length=1, max_length=100)],
                  key: Annotated[list[str], Query(max_length=200, description=(
                      "the metric keys; at least one `key` or `key_pattern` is required"))] = [],  # noqa: B006 - FastAPI copies it
                  key_pattern: Annotated[list[Annotated[str, StringConstraints(max_length=200),
                                                        WithJsonSchema({"type": "string", "maxLength": 200,
                                                                        "format": "regex"})]], Query(
                      max_length=20, description="regular expressions (searched, as JavaScript's RegExp.test): "
                                                 "every key of these runs that one matches is added to `key`; at "
                                                 "least one `key` or `key_pattern` is required; a pattern that is "
                                                 "not a regular expression, or nests quantifiers (`(a+)+`: "
                                                 "exponential backtracking), is a 422")] = [],  # noqa: B006
                  step_min: Annotated[int | None, Query(ge=0)] = None,
                  step_max: Annotated[int | None, Query(ge=0)] = None,
                  max_points: MaxPoints = 1000, wall_times: WallTimes = True):
    """Runs x keys x step range, for charts and comparisons: one request for a whole page of charts."""
    keys = list(key or [])
    if key_pattern:
        if any(_NESTED_QUANTIFIER.search(p) for p in key_pattern):  # (a+)+ and kin backtrack exponentially
            raise unprocessable(["query", "key_pattern"], "key_pattern: nested quantifiers are refused.")
        try:
            patterns = [re.compile(p) for p in key_pattern]
        except re.error as exc:
            raise unprocessable(["query", "key_pattern"], f"key_pattern: {exc}.") from None
        keys += [k for k in metrics.keys(session=session, run_ids=run_id) if any(p.search(k) for p in patterns)]
    if not keys and not key_pattern:
        raise unprocessable(["query", "key"], "key: give at least one key or key_pattern.")
    data = metrics.series(session=session, run_ids=run_id, key_list=list(dict.fromkeys(keys)), step_min=step_min,
                          step_max=step_max, max_points=max_points, wall_times=wall_times)
    return MetricSeriesList(data=data, count=len(data))


@router.get("/metrics/keys", response_model=MetricKeys)
def query_metric_keys(session: SessionDep, run_id: Annotated[list[int], Query(min_length=1, max_length=100)]):
    data = metrics.keys(session=session, run_ids=run_id)
    return MetricKeys(data=data, count=len(data))
