"""Metric points: idempotent batch ingest, keys, series queries with min/max-preserving downsampling,
latest values, export."""
from __future__ import annotations

import io
import math
import time
from itertools import repeat
from operator import itemgetter

import numpy as np
from sqlalchemy import func
from sqlmodel import Session, select

from backend.models import LatestMetric, MetricPoint, MetricSeries, MetricsIngest, Run
from backend.models.common import finite_or_text
from backend.services import health, metric_buckets
from backend.services.events import RUNS_CHANNEL, insert_event, run_channel
from backend.services.held_out import VAL_PREFIX, held_out
from backend.services.runs import announce, update_progress
from backend.services.upsert import in_lock_order, write_lock
from engine import metric_names as names

STEP_KEY = names.GLOBAL_STEP
TOTAL_KEY = names.TOTAL_STEPS


def _upsert_sql(session: Session, run_id: int) -> str:
    """Plain SQL for the hot path: the ORM's per-row bookkeeping costs ~10x the database's own work.
    run_id is an integer primary key from the database, so it is written into the statement."""
    style = session.get_bind().dialect.paramstyle
    marks = ", ".join(["?"] * 4) if style == "qmark" else ", ".join(["%s"] * 4)
    return (f'INSERT INTO metric_point (run_id, "key", step, value, wall_time) VALUES ({int(run_id)}, {marks}) '
            'ON CONFLICT (run_id, "key", step) DO UPDATE SET value = excluded.value, wall_time = excluded.wall_time')


INF = float("inf")


def _plain_batch(body: MetricsIngest, now: float) -> tuple[list[tuple], dict] | None:
    """A body of `series` only, each key once, each step once per key and every value finite (what a training
    logger sends): its rows and step ranges, built without a Python loop per point. None otherwise (the
    general path then dedups and spells non-finite values)."""
    if body.points:
        return None
    rows: list[tuple] = []
    ranges: dict[tuple[int, int], list[str]] = {}
    seen: set[str] = set()
    for s in body.series:
        if s.key in seen or len(set(s.steps)) != len(s.steps):
            return None
        seen.add(s.key)
        try:
            if not all(map(math.isfinite, s.values)):
                return None
        except TypeError:  # None, or "NaN" / "Infinity" spelled out
            return None
        if s.steps:
            rows.extend(zip(repeat(s.key), s.steps, s.values, s.wall_times or repeat(now)))
            ranges.setdefault((min(s.steps), max(s.steps)), []).append(s.key)
    return rows, ranges


def ingest(*, session: Session, run: Run, body: MetricsIngest) -> int:
    now = time.time()
    plain = _plain_batch(body, now)
    special = nan = False  # special: any NaN / infinity, the live copy then needs JSON-safe spellings
    if plain is not None:
        values, ranges = plain
    else:
        rows: dict[tuple[str, int], tuple] = {}
        for key, step, value, wall_time in body.rows(now):  # last write wins, as across batches
            if value is None or value != value or value == INF or value == -INF:  # noqa: PLR0124 - NaN test
                special = True
                if value is None or math.isnan(value):
                    value, nan = None, True  # NaN is stored as NULL
            rows[(key, step)] = (key, step, value, wall_time)
        values = list(rows.values())
        ranges = _step_ranges(values)
    if not values:
        return 0
    live = {"points": [(r[0], r[1], finite_or_text(r[2]), r[3]) for r in values] if special else values}
    written = {key for key_list in ranges.values() for key in key_list}  # progress keys: skip the scan without them
    steps = [r[2] for r in values if r[0] == STEP_KEY and r[2] is not None] if STEP_KEY in written else []
    totals = [r[2] for r in values if r[0] == TOTAL_KEY and r[2] is not None] if TOTAL_KEY in written else []
    # judged before the write lock (cost ~ the new points, a plain batch a key at a time), written inside it
    judged = health.judge_metrics(session, run, values, body.series if plain is not None else None)
    try:
        _write(session, run, values, ranges, nan, live, written, steps, totals, judged)
    except BaseException:
        health.discard(session, judged)  # never stored: the run's health state goes back to the table's
        raise
    finally:
        health.release(judged)
    return len(values)


def _write(session: Session, run: Run, values, ranges, nan, live, written, steps, totals, judged) -> None:
    with write_lock(session):
        conn = session.connection()
        bucketed = metric_buckets.in_use(session)
        # a batch of new steps without NaN (a training step's metrics) is folded into the buckets as they are;
        # a resend, a rewrite or a NaN has them recomputed from the points
        fold = bucketed and not nan and metric_buckets.only_new_points(metric_buckets.executor_of(session), run.id, ranges)
        conn.exec_driver_sql(_upsert_sql(session, run.id), in_lock_order(session, values, key=itemgetter(0, 1)))
        if fold:
            metric_buckets.merge_new(conn.exec_driver_sql, run.id, values)
        elif bucketed:
            metric_buckets.refresh(metric_buckets.executor_of(session), run.id, ranges)
        insert_event(session, run_channel(run.id), "metrics", live)
        if update_progress(run, int(max(steps)) if steps else None, int(max(totals)) if totals else None):
            session.add(run)
            announce(session, run, kind="progress")
        health.apply(session, run, judged)
        if any(key.startswith(VAL_PREFIX) for key in written):  # a validation: the runs list's held-out score
            insert_event(session, RUNS_CHANNEL, "progress", {"id": run.id, **held_out(session=session,
                                                                                     run_ids=[run.id]).get(run.id, {})})
        session.commit()


def _step_ranges(rows) -> dict[tuple[int, int], list[str]]:
    extent: dict[str, list[int]] = {}
    for key, step, _value, _wall in rows:
        e = extent.get(key)
        if e is None:
            extent[key] = [step, step]
        elif step < e[0]:
            e[0] = step
        elif step > e[1]:
            e[1] = step
    ranges: dict[tuple[int, int], list[str]] = {}
    for key, (lo, hi) in extent.items():
        ranges.setdefault((lo, hi), []).append(key)
    return ranges


def keys(*, session: Session, run_ids: list[int]) -> list[str]:
    if metric_buckets.in_use(session):
        return metric_buckets.keys(metric_buckets.executor_of(session), run_ids)
    stmt = select(MetricPoint.key).where(MetricPoint.run_id.in_(run_ids)).distinct().order_by(MetricPoint.key)
    return list(session.exec(stmt).all())


def downsample_indices(values: np.ndarray, max_points: int) -> np.ndarray:
    """Indices of at most `max_points` points: the series cut into max_points/2 buckets of equal count,
    each keeping its minimum and its maximum, so a spike is never averaged away. NaN sorts above every
    number, so a bucket holding a NaN shows it (a NaN loss must stay visible)."""
    n = len(values)
    if n <= max_points:
        return np.arange(n)
    buckets = max(1, max_points // 2)
    bucket = (np.arange(n) * buckets) // n
    order = np.lexsort((values, bucket))
    sorted_bucket = bucket[order]
    first = np.r_[True, sorted_bucket[1:] != sorted_bucket[:-1]]
    last = np.r_[sorted_bucket[1:] != sorted_bucket[:-1], True]
    return np.unique(np.concatenate([order[first], order[last]]))


def series(*, session: Session, run_ids: list[int], key_list: list[str], step_min: int | None = None,
           step_max: int | None = None, max_points: int | None = None, wall_times: bool = True) -> list[MetricSeries]:
    """`wall_times=False`: each series' wall_times empty (a chart on a step axis has no use for them)."""
    if not run_ids or not key_list:
        return []
    if max_points and metric_buckets.in_use(session):
        if step_min is None and step_max is None:
            out = _series_buckets(session, run_ids, key_list, max_points)
        else:
            out = _series_sqlite(session, run_ids, key_list, step_min, step_max, max_points)
    else:
        out = _series_numpy(session, run_ids, key_list, step_min, step_max, max_points)
    if not wall_times:
        for s in out:
            s.wall_times = []
    return out


def _step_range(stmt, step_min, step_max):
    if step_min is not None:
        stmt = stmt.where(MetricPoint.step >= step_min)
    if step_max is not None:
        stmt = stmt.where(MetricPoint.step <= step_max)
    return stmt


def _make_series(run_id, key, rows, total) -> MetricSeries:
    return MetricSeries.model_construct(run_id=run_id, key=key, steps=[r[0] for r in rows],
                                        values=[finite_or_text(r[1]) for r in rows], wall_times=[r[2] for r in rows],
                                        total_points=total, downsampled=len(rows) < total)


def _series_buckets(session, run_ids, key_list, max_points) -> list[MetricSeries]:
    """Whole series from the pre-aggregated buckets: per series a few index seeks and at most ~8 x max_points
    bucket rows, however many points it has."""
    execute = metric_buckets.executor_of(session)
    out = []
    for run_id in dict.fromkeys(run_ids):
        for key in dict.fromkeys(key_list):
            lo, hi, total = execute(
                'SELECT (SELECT MIN(step) FROM metric_point WHERE run_id = ? AND "key" = ?), '
                '(SELECT MAX(step) FROM metric_point WHERE run_id = ? AND "key" = ?), '
                f'(SELECT SUM(n) FROM metric_bucket WHERE run_id = ? AND level = {metric_buckets.TOP} AND "key" = ?)',
                (run_id, key) * 3)[0]
            if lo is None:
                continue
            if total is None:  # points without buckets (written around the server): read them
                out.extend(_series_sqlite(session, [run_id], [key], None, None, max_points))
                continue
            if total <= max_points:
                rows = execute('SELECT step, value, wall_time FROM metric_point WHERE run_id = ? AND "key" = ? '
                               "ORDER BY step", (run_id, key))
            else:
                rows = metric_buckets.downsample(execute, run_id, key, lo, hi, max_points)
                if not rows:  # too few steps per chart bucket for the coarsest level: the points are few
                    out.extend(_series_sqlite(session, [run_id], [key], None, None, max_points))
                    continue
            out.append(_make_series(run_id, key, rows, int(total)))
    return out


def _series_sqlite(session, run_ids, key_list, step_min, step_max, max_points) -> list[MetricSeries]:
    """Downsampling inside SQLite: per series, buckets of equal step range, each bucket's min row and max row
    (SQLite returns the other columns of the row holding a lone MIN()/MAX()), plus one row per bucket
    holding a NaN (stored NULL) so a NaN stays visible. Only the kept rows reach Python."""
    conn = session.connection()
    ext = session.execute(_step_range(
        select(MetricPoint.run_id, MetricPoint.key, func.min(MetricPoint.step), func.max(MetricPoint.step),
               func.count()).where(MetricPoint.run_id.in_(run_ids), MetricPoint.key.in_(key_list)),
        step_min, step_max).group_by(MetricPoint.run_id, MetricPoint.key)).all()
    extents = {(r[0], r[1]): (r[2], r[3], r[4]) for r in ext}
    where = 'run_id = ? AND "key" = ? AND step >= ? AND step <= ?'
    out = []
    for run_id in dict.fromkeys(run_ids):
        for key in dict.fromkeys(key_list):
            if (run_id, key) not in extents:
                continue
            lo, hi, total = extents[(run_id, key)]
            args = (run_id, key, lo, hi)
            if total <= max_points:
                rows = conn.exec_driver_sql(f"SELECT step, value, wall_time FROM metric_point WHERE {where} "
                                            "ORDER BY step", args).all()
                out.append(_make_series(run_id, key, rows, total))
                continue
            nans = conn.exec_driver_sql(
                f"SELECT MIN(step), NULL, MIN(wall_time) FROM metric_point WHERE {where} AND value IS NULL "
                f"GROUP BY (step - ?) * ? / ?", (*args, lo, max_points // 2, hi - lo + 1)).all()
            buckets = max(1, (max_points - len(nans)) // 2)
            span = hi - lo + 1
            picked = {}
            for agg in ("MIN", "MAX"):
                for step, value, wall in conn.exec_driver_sql(
                        f"SELECT step, {agg}(value), wall_time FROM metric_point WHERE {where} AND value IS NOT NULL "
                        f"GROUP BY (step - ?) * ? / ?", (*args, lo, buckets, span)).all():
                    picked[step] = (step, value, wall)
            for step, _none, wall in nans:
                picked[step] = (step, None, wall)
            out.append(_make_series(run_id, key, [picked[s] for s in sorted(picked)], total))
    return out


def _series_numpy(session, run_ids, key_list, step_min, step_max, max_points) -> list[MetricSeries]:
    """One query for every (run, key) pair, split and downsampled with numpy (any database)."""
    stmt = _step_range(select(MetricPoint.run_id, MetricPoint.key, MetricPoint.step, MetricPoint.value,
                              MetricPoint.wall_time).where(MetricPoint.run_id.in_(run_ids),
                                                           MetricPoint.key.in_(key_list)), step_min, step_max)
    rows = session.execute(stmt.order_by(MetricPoint.run_id, MetricPoint.key, MetricPoint.step)).all()
    groups: dict[tuple[int, str], list] = {}
    for row in rows:
        groups.setdefault((row[0], row[1]), []).append(row)
    out = []
    for run_id in dict.fromkeys(run_ids):
        for key in dict.fromkeys(key_list):
            group = groups.get((run_id, key))
            if not group:
                continue
            n = len(group)
            vals = np.fromiter((np.nan if r[3] is None else r[3] for r in group), dtype=np.float64, count=n)
            keep = downsample_indices(vals, max_points) if max_points else np.arange(n)
            out.append(_make_series(run_id, key, [(group[i][2], group[i][3], group[i][4]) for i in keep.tolist()], n))
    return out


def latest(*, session: Session, run_id: int, key_list: list[str] | None = None) -> list[LatestMetric]:
    newest = (select(MetricPoint.key, func.max(MetricPoint.step).label("step"))
              .where(MetricPoint.run_id == run_id).group_by(MetricPoint.key).subquery())
    stmt = (select(MetricPoint).join(newest, (MetricPoint.key == newest.c.key) & (MetricPoint.step == newest.c.step))
            .where(MetricPoint.run_id == run_id).order_by(MetricPoint.key))
    if key_list:
        stmt = stmt.where(MetricPoint.key.in_(key_list))
    return [LatestMetric(key=p.key, step=p.step, value=finite_or_text(p.value), wall_time=p.wall_time)
            for p in session.exec(stmt).all()]


def export(*, session: Session, run_id: int, fmt: str, layout: str) -> bytes:
    import pandas as pd  # heavy, for exports only: loaded on the first export, not with the server

    rows = session.execute(select(MetricPoint.step, MetricPoint.key, MetricPoint.value, MetricPoint.wall_time)
                           .where(MetricPoint.run_id == run_id)
                           .order_by(MetricPoint.step, MetricPoint.key)).all()
    frame = pd.DataFrame(rows, columns=["step", "key", "value", "wall_time"]).astype({"value": "float64"})
    if layout == "wide":
        wide = frame.pivot(index="step", columns="key", values="value")
        wide.columns.name = None
        frame = wide.reset_index()
    if fmt == "csv":
        return frame.to_csv(index=False).encode()
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()
