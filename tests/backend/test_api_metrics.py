"""The REST API on a real SQLite file (dispatch off: runs stay queued or are recorded as external); the tests that
read and write the database the most also on PostgreSQL (tests/backend/postgres.py). Metrics: ingest (points and columnar
series), idempotence, limits, downsampling, export."""
from __future__ import annotations

import io
import math

import pyarrow.parquet as pq
import pytest

from tests.backend.conftest import DATABASES, auth, external_run

API = "/api/v1"
ON_BOTH = pytest.mark.parametrize("database", DATABASES, indirect=True)


# ------------------------------------------------------------------------------------------ metrics
@ON_BOTH
def test_metrics_ingest_is_idempotent_and_queryable(client, settings):
    run = external_run(client)
    points = [{"key": "critic/score/mean", "step": s, "value": s / 10} for s in range(100)]
    points += [{"key": "actor/pg_loss", "step": 5, "value": "NaN"}, {"key": "actor/pg_loss", "step": 6,
                                                                       "value": "Infinity"}]
    for _ in range(2):  # the same batch twice stores it once
        r = client.post(f"{API}/runs/{run['id']}/metrics", json={"points": points}, headers=auth(run))
        assert r.status_code == 200 and r.json()["accepted"] == 102
    series = client.get(f"{API}/runs/{run['id']}/metrics", params={"key": "critic/score/mean"}).json()
    assert series["data"][0]["total_points"] == 100 and series["data"][0]["steps"] == list(range(100))
    loss = client.get(f"{API}/runs/{run['id']}/metrics", params={"key": "actor/pg_loss"}).json()["data"][0]
    assert loss["values"] == ["NaN", "Infinity"]
    keys = client.get(f"{API}/runs/{run['id']}/metrics/keys").json()
    assert keys == {"data": ["actor/pg_loss", "critic/score/mean"], "count": 2}
    latest = {m["key"]: m for m in client.get(f"{API}/runs/{run['id']}/metrics/latest").json()["data"]}
    assert latest["critic/score/mean"]["step"] == 99 and latest["critic/score/mean"]["value"] == 9.9
    ranged = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "critic/score/mean",
                                                  "step_min": 10, "step_max": 19}).json()["data"][0]
    assert ranged["steps"] == list(range(10, 20))
    # overwrite = upsert
    client.post(f"{API}/runs/{run['id']}/metrics", json={"points": [{"key": "critic/score/mean", "step": 3,
                                                                     "value": 42}]}, headers=auth(run))
    assert client.get(f"{API}/runs/{run['id']}/metrics", params={"key": "critic/score/mean"}
                      ).json()["data"][0]["values"][3] == 42


def test_metrics_limit_is_413(client, settings):
    run = external_run(client)
    limit = settings.max_metric_points_per_request
    too_many = [{"key": "k", "step": s, "value": 1.0} for s in range(limit + 1)]
    r = client.post(f"{API}/runs/{run['id']}/metrics", json={"points": too_many}, headers=auth(run))
    assert r.status_code == 413 and "points" in r.json()["detail"]
    r = client.post(f"{API}/runs/{run['id']}/metrics", json={"points": [{"key": "k", "step": -1, "value": 1}]},
                    headers=auth(run))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "step"


@ON_BOTH
def test_downsampling_keeps_spikes(client):
    run = external_run(client)
    n = 5000
    values = [math.sin(s / 100) for s in range(n)]
    values[1234], values[4321] = 100.0, -100.0
    points = [{"key": "loss", "step": s, "value": v} for s, v in enumerate(values)]
    client.post(f"{API}/runs/{run['id']}/metrics", json={"points": points}, headers=auth(run))
    for max_points in (50, 200, 1000):
        s = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "loss",
                                                 "max_points": max_points}).json()["data"][0]
        assert s["downsampled"] and len(s["steps"]) <= max_points and s["total_points"] == n
        assert s["steps"] == sorted(s["steps"])
        assert 100.0 in s["values"] and -100.0 in s["values"]
        assert s["steps"][s["values"].index(100.0)] == 1234


@ON_BOTH
def test_series_without_wall_times_are_the_same_points(client):
    """wall_times=false (the Compare page on a step axis): the same downsampled points, spikes and the last point
    kept, only the wall times left out; the default still sends them, one per point."""
    run = external_run(client)
    n = 5000
    values = [math.cos(s / 50) for s in range(n)]
    values[777], values[3333] = 50.0, -50.0
    series = [{"key": "loss", "steps": list(range(n)), "values": values,
               "wall_times": [1.7e9 + 2.0 * s for s in range(n)]}]
    assert client.post(f"{API}/runs/{run['id']}/metrics", json={"series": series}, headers=auth(run)).status_code == 200
    for path, params in ((f"{API}/metrics", {"run_id": run["id"], "key": "loss"}),
                         (f"{API}/runs/{run['id']}/metrics", {"key": "loss"})):
        full = client.get(path, params={**params, "max_points": 300}).json()["data"][0]
        lean = client.get(path, params={**params, "max_points": 300, "wall_times": "false"}).json()["data"][0]
        assert full["downsampled"] and len(full["steps"]) <= 300
        assert full["wall_times"] == [1.7e9 + 2.0 * s for s in full["steps"]]
        assert lean["wall_times"] == []
        assert (lean["steps"], lean["values"], lean["total_points"], lean["downsampled"]) == \
            (full["steps"], full["values"], full["total_points"], full["downsampled"])
        assert lean["steps"][lean["values"].index(50.0)] == 777 and lean["steps"][lean["values"].index(-50.0)] == 3333
        assert lean["steps"][0] == 0 and lean["steps"][-1] == n - 1 and lean["values"][-1] == values[-1]
    bad = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "loss", "wall_times": "maybe"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "wall_times"


@ON_BOTH
def test_metrics_export_csv_and_parquet(client):
    run = external_run(client)
    points = [{"key": k, "step": s, "value": s * (i + 1)} for s in range(5) for i, k in enumerate(["a", "b"])]
    client.post(f"{API}/runs/{run['id']}/metrics", json={"points": points}, headers=auth(run))
    csv = client.get(f"{API}/runs/{run['id']}/metrics/export", params={"format": "csv"})
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    lines = csv.text.strip().splitlines()
    assert lines[0] == "step,a,b" and lines[3] == "2,2.0,4.0"
    parquet = client.get(f"{API}/runs/{run['id']}/metrics/export", params={"format": "parquet", "layout": "long"})
    table = pq.read_table(io.BytesIO(parquet.content))
    assert table.num_rows == 10 and table.column_names == ["step", "key", "value", "wall_time"]
    assert client.get(f"{API}/runs/{run['id']}/metrics/export", params={"format": "xlsx"}).status_code == 422



@ON_BOTH
def test_metrics_columnar_series_ingest(client, settings):
    run = external_run(client)
    body = {"series": [{"key": "a", "steps": [1, 2, 3], "values": [0.1, "NaN", 0.3]},
                       {"key": "b", "steps": [1], "values": [5.0], "wall_times": [1700000000.0]}],
            "points": [{"key": "c", "step": 1, "value": 1.0}]}
    r = client.post(f"{API}/runs/{run['id']}/metrics", json=body, headers=auth(run))
    assert r.status_code == 200 and r.json()["accepted"] == 5
    data = {s["key"]: s for s in client.get(f"{API}/runs/{run['id']}/metrics").json()["data"]}
    assert data["a"]["values"] == [0.1, "NaN", 0.3] and data["b"]["wall_times"] == [1700000000.0]
    bad = client.post(f"{API}/runs/{run['id']}/metrics", json={"series": [{"key": "a", "steps": [1, 2],
                                                                          "values": [1.0]}]}, headers=auth(run))
    assert bad.status_code == 422 and "same length" in bad.text
    over = settings.max_metric_points_per_request + 1
    big = {"series": [{"key": "a", "steps": list(range(over)), "values": [1.0] * over}]}
    assert client.post(f"{API}/runs/{run['id']}/metrics", json=big, headers=auth(run)).status_code == 413


@ON_BOTH
def test_downsampling_keeps_nan_and_matches_numpy_fallback(client):
    from sqlmodel import Session

    from backend.services import metrics

    run = external_run(client)
    n = 3000
    values = [float(s % 17) for s in range(n)]
    values[2000] = "NaN"
    values[10], values[2999] = 1e6, -1e6
    client.post(f"{API}/runs/{run['id']}/metrics", json={"series": [{"key": "x", "steps": list(range(n)),
                                                                     "values": values}]}, headers=auth(run))
    got = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "x", "max_points": 100}).json()["data"][0]
    assert len(got["steps"]) <= 100 and got["steps"] == sorted(got["steps"]) and got["downsampled"]
    assert got["values"][got["steps"].index(2000)] == "NaN"
    assert 1e6 in got["values"] and -1e6 in got["values"]
    with Session(client.app.state.engine) as session:  # the portable path keeps the same extremes
        portable = metrics._series_numpy(session, [run["id"]], ["x"], None, None, 100)[0]
    assert len(portable.steps) <= 100 and {1e6, -1e6, "NaN"} <= set(portable.values)
    small = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "x", "step_min": 5, "step_max": 14,
                                                 "max_points": 100}).json()["data"][0]
    assert small["steps"] == list(range(5, 15)) and not small["downsampled"]
