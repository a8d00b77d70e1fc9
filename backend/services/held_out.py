"""Each run's latest held-out score, as the Runs table's Held-out column shows it: read by the runs list, its
sort (services/runs.py) and ingest's `progress` event (services/metrics.py), so it sits below both."""
from __future__ import annotations

import math

from sqlmodel import Session, select

from backend.models import MetricPoint
from backend.services import metric_buckets
from engine import metric_names as names

VAL_PREFIX = names.VAL_CORE_PREFIX
VAL_SCORE = names.VAL_SCORE  # verl's `acc` when the reward returns it, else `reward`: a mean@N


def held_out(*, session: Session, run_ids: list[int]) -> dict[int, dict]:
    """Each run's latest held-out score (`val_score`, `val_score_key`, `val_score_step`; runs that logged no
    `val-core/` key are left out): the latest finite value of its first `val-core/<source>/(acc|reward)/mean@N` key, else
    of its first `val-core/` key. One query for the keys (on SQLite the buckets' top level: a row per series),
    then one index lookup per run."""
    keys: dict[int, list[str]] = {}
    ids = list(dict.fromkeys(run_ids))
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        if metric_buckets.in_use(session):
            marks = ", ".join("?" * len(chunk))
            rows = metric_buckets.executor_of(session)(f'SELECT run_id, "key" FROM metric_bucket WHERE level = {metric_buckets.TOP} '
                                      f'AND run_id IN ({marks}) AND "key" >= ? AND "key" < ?',
                                      (*chunk, VAL_PREFIX, VAL_PREFIX[:-1] + "0"))
        else:
            rows = session.execute(select(MetricPoint.run_id, MetricPoint.key).distinct().where(
                MetricPoint.run_id.in_(chunk), MetricPoint.key.startswith(VAL_PREFIX))).all()
        for run_id, key in rows:
            keys.setdefault(run_id, []).append(key)
    out: dict[int, dict] = {}
    for run_id, found in keys.items():
        found = sorted(set(found))
        key = next((k for k in found if VAL_SCORE.match(k)), found[0])
        latest = session.execute(select(MetricPoint.step, MetricPoint.value)
                                 .where(MetricPoint.run_id == run_id, MetricPoint.key == key,
                                        MetricPoint.value.is_not(None))
                                 .order_by(MetricPoint.step.desc()).limit(8)).all()
        step, value = next(((s, v) for s, v in latest if math.isfinite(v)), (None, None))
        out[run_id] = {"val_score": value, "val_score_key": key, "val_score_step": step}
    return out
