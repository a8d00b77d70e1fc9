"""Metric points: idempotent batch ingest, keys, series queries with min/max-preserving downsampling,
latest values, export."""
from __future__ import annotations

import io
import math
import time

import numpy as np
from sqlalchemy import func
from sqlmodel import Session, select

from backend.models import LatestMetric, MetricPoint, MetricPointIn, MetricSeries, Run
from backend.models.common import finite_or_text
from backend.services.events import add_event, run_channel
from backend.services.runs import announce, update_progress

STEP_KEY = "training/global_step"
TOTAL_KEY = "training/total_steps"


def ingest(session: Session, run: Run, points: list[MetricPointIn]) -> int:
    now = time.time()
    rows: dict[tuple[str, int], dict] = {}
    for p in points:  # last write wins inside a batch, as across batches
        value = None if p.value is None or math.isnan(p.value) else p.value
        rows[(p.key, p.step)] = {"run_id": run.id, "key": p.key, "step": p.step, "value": value,
                                 "wall_time": p.wall_time if p.wall_time is not None else now}
    if not rows:
        return 0
    from backend.services.upsert import insert_for

    stmt = insert_for(session, MetricPoint)
    stmt = stmt.on_conflict_do_update(index_elements=["run_id", "key", "step"],
                                      set_={"value": stmt.excluded.value, "wall_time": stmt.excluded.wall_time})
    values = list(rows.values())
    session.execute(stmt, values)
    add_event(session, run_channel(run.id), "metrics",
              {"points": [[r["key"], r["step"], finite_or_text(r["value"]), r["wall_time"]] for r in values]})
    steps = [r["value"] for r in values if r["key"] == STEP_KEY and r["value"] is not None]
    totals = [r["value"] for r in values if r["key"] == TOTAL_KEY and r["value"] is not None]
    if update_progress(run, int(max(steps)) if steps else None, int(max(totals)) if totals else None):
        session.add(run)
        announce(session, run, kind="progress")
    session.commit()
    return len(values)


def keys(session: Session, run_ids: list[int]) -> list[str]:
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


def series(session: Session, run_ids: list[int], key_list: list[str], step_min: int | None,
           step_max: int | None, max_points: int | None) -> list[MetricSeries]:
    out = []
    for run_id in run_ids:
        for key in key_list:
            stmt = (select(MetricPoint.step, MetricPoint.value, MetricPoint.wall_time)
                    .where(MetricPoint.run_id == run_id, MetricPoint.key == key))
            if step_min is not None:
                stmt = stmt.where(MetricPoint.step >= step_min)
            if step_max is not None:
                stmt = stmt.where(MetricPoint.step <= step_max)
            rows = session.execute(stmt.order_by(MetricPoint.step)).all()
            if not rows:
                continue
            steps = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            vals = np.fromiter((np.nan if r[1] is None else r[1] for r in rows), dtype=np.float64, count=len(rows))
            walls = np.fromiter((r[2] for r in rows), dtype=np.float64, count=len(rows))
            keep = downsample_indices(vals, max_points) if max_points else np.arange(len(rows))
            out.append(MetricSeries(
                run_id=run_id, key=key, steps=steps[keep].tolist(),
                values=[finite_or_text(v) for v in vals[keep].tolist()], wall_times=walls[keep].tolist(),
                total_points=len(rows), downsampled=len(keep) < len(rows)))
    return out


def latest(session: Session, run_id: int, key_list: list[str] | None = None) -> list[LatestMetric]:
    newest = (select(MetricPoint.key, func.max(MetricPoint.step).label("step"))
              .where(MetricPoint.run_id == run_id).group_by(MetricPoint.key).subquery())
    stmt = (select(MetricPoint).join(newest, (MetricPoint.key == newest.c.key) & (MetricPoint.step == newest.c.step))
            .where(MetricPoint.run_id == run_id).order_by(MetricPoint.key))
    if key_list:
        stmt = stmt.where(MetricPoint.key.in_(key_list))
    return [LatestMetric(key=p.key, step=p.step, value=finite_or_text(p.value), wall_time=p.wall_time)
            for p in session.exec(stmt).all()]


def export(session: Session, run_id: int, fmt: str, layout: str) -> bytes:
    import pandas as pd

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
