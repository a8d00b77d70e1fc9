"""Pre-aggregated metric buckets: ingest keeps them equal to a rebuild from the points, chart queries read them
and keep what matters (extremes, NaN, the first and last point), runs' keys come from them."""
from __future__ import annotations

import math
import random
import sqlite3

import pytest

from backend.services import metric_buckets
from tests.backend.conftest import auth, external_run

API = "/api/v1"


@pytest.fixture
def database():
    """The buckets are SQLite's (other databases downsample in numpy): the SQLite file, even where
    RLSTUDIO_TEST_DATABASE puts the other tests on PostgreSQL."""


def db(settings):
    return sqlite3.connect(settings.data_dir / "rlstudio.db")


def buckets(conn, run_id):
    return conn.execute("SELECT * FROM metric_bucket WHERE run_id = ? ORDER BY level, key, bucket", (run_id,)).fetchall()


def test_ingest_keeps_buckets_equal_to_a_rebuild(client, settings):
    run = external_run(client)
    rng = random.Random(0)
    n = 5000
    for start in range(0, n, 137):  # the logger's batches: every key over the same steps
        steps = list(range(start, min(n, start + 137)))
        body = {"series": [{"key": k, "steps": steps, "values": [rng.gauss(0, 1) for _ in steps]}
                           for k in ("a", "b", "c")]}
        assert client.post(f"{API}/runs/{run['id']}/metrics", json=body, headers=auth(run)).status_code == 200
    # rewrites of old steps (a spike, a NaN), one key alone, steps far apart in one batch
    fixes = [{"key": "a", "step": 17, "value": 50.0}, {"key": "a", "step": 4000, "value": "NaN"},
             {"key": "b", "step": 3, "value": -50.0}, {"key": "b", "step": 70_000, "value": 1.0},
             {"key": "d", "step": 1, "value": "Infinity"}]
    assert client.post(f"{API}/runs/{run['id']}/metrics", json={"points": fixes}, headers=auth(run)).status_code == 200
    with db(settings) as conn:
        incremental = buckets(conn, run["id"])
        assert len(incremental) > 3 * n // 16
        metric_buckets.rebuild(lambda sql, params=(): conn.execute(sql, params).fetchall(), [run["id"]])
        assert buckets(conn, run["id"]) == incremental
        top = {r[0]: r[1] for r in conn.execute(
            f"SELECT key, SUM(n) FROM metric_bucket WHERE run_id = ? AND level = {metric_buckets.TOP} GROUP BY key",
            (run["id"],))}
    assert top == {"a": n, "b": n + 1, "c": n, "d": 1}
    assert client.get(f"{API}/runs/{run['id']}/metrics/keys").json()["data"] == ["a", "b", "c", "d"]
    # deleting the run removes its buckets (foreign key cascade)
    client.post(f"{API}/runs/{run['id']}/status", json={"status": "succeeded"}, headers=auth(run))
    assert client.delete(f"{API}/runs/{run['id']}").status_code == 204
    with db(settings) as conn:
        assert buckets(conn, run["id"]) == []


def test_new_steps_are_folded_into_buckets_equal_to_a_rebuild(client, settings):
    """Batches of new steps (folded into the buckets without reading the points back) in any order, with tied
    values, infinities and a key that appears late, then a resend with other values and a NaN (recomputed):
    the buckets equal a rebuild after each, ties going to the lower step as the rebuild's do."""
    run = external_run(client)
    rng = random.Random(1)

    def send(body):
        assert client.post(f"{API}/runs/{run['id']}/metrics", json=body, headers=auth(run)).status_code == 200

    def check():
        with db(settings) as conn:
            stored = buckets(conn, run["id"])
            metric_buckets.rebuild(lambda sql, params=(): conn.execute(sql, params).fetchall(), [run["id"]])
            assert buckets(conn, run["id"]) == stored
            return stored

    starts = list(range(0, 3000, 50))
    rng.shuffle(starts)  # later batches land before, between and after earlier ones
    for start in starts:
        steps = list(range(start, start + 50))
        series = [{"key": k, "steps": steps, "values": [float(rng.randint(0, 3)) for _ in steps]} for k in ("a", "b")]
        if start % 200 == 0:
            series[1]["values"][7] = rng.choice(["Infinity", "-Infinity"])
        if start >= 1000:
            series.append({"key": "late", "steps": steps[::7], "values": [rng.random() for _ in steps[::7]]})
        send({"series": series})
    first = check()
    assert any(r[6] == float("-inf") for r in first) and any(r[9] == float("inf") for r in first)
    send({"series": [{"key": "a", "steps": list(range(100, 160)), "values": [9.0] * 59 + ["NaN"]}]})  # a resend
    assert check() != first
    with db(settings) as conn:
        top = dict(conn.execute(f"SELECT key, SUM(n) FROM metric_bucket WHERE run_id = ? AND level = "
                                f"{metric_buckets.TOP} GROUP BY key", (run["id"],)).fetchall())
    assert top == {"a": 3000, "b": 3000, "late": 40 * len(range(0, 50, 7))}  # 40 batches from step 1,000


def test_chart_query_from_buckets_keeps_extremes_nan_and_ends(client, settings):
    run = external_run(client)
    n = 100_000
    steps = list(range(10, 10 + n))
    values = [math.sin(s / 3000) for s in steps]
    values[12_345], values[77_777] = 9.0, -9.0
    values[50_000] = "NaN"
    for i in range(0, n, 10_000):
        client.post(f"{API}/runs/{run['id']}/metrics", headers=auth(run), json={"series": [
            {"key": "loss", "steps": steps[i:i + 10_000], "values": values[i:i + 10_000]}]})
    for max_points in (20, 200, 1000):
        s = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "loss",
                                                 "max_points": max_points}).json()["data"][0]
        assert s["downsampled"] and s["total_points"] == n
        assert 0.5 * max_points <= len(s["steps"]) <= max_points
        assert s["steps"] == sorted(s["steps"]) and len(set(s["steps"])) == len(s["steps"])
        assert s["steps"][0] == 10 and s["steps"][-1] == 10 + n - 1  # the final value is there
        got = dict(zip(s["steps"], s["values"]))
        assert got[10 + 12_345] == 9.0 and got[10 + 77_777] == -9.0 and got[10 + 50_000] == "NaN"
        for step, value in got.items():  # every point is a real point, with its own step
            assert value == "NaN" or value == values[step - 10]
        # the curve's shape survives: each chart bucket's min and max are where the sine puts them
        finite = [v for v in s["values"] if v != "NaN"]
        assert max(finite) == 9.0 and min(finite) == -9.0
        assert sum(1 for v in finite if v > 0.99) >= 2 and sum(1 for v in finite if v < -0.99) >= 2
    # a small series and a step range are read from the points
    small = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "loss", "step_min": 100,
                                                 "step_max": 149, "max_points": 100}).json()["data"][0]
    assert small["steps"] == list(range(100, 150)) and not small["downsampled"]


def test_chart_query_reads_points_written_around_the_server(client, settings):
    """Points inserted straight into the database (no buckets) are still charted, from the points."""
    run = external_run(client)
    with db(settings) as conn:
        conn.executemany("INSERT INTO metric_point (run_id, key, step, value, wall_time) VALUES (?, 'x', ?, ?, 0)",
                         [(run["id"], s, float(s % 13)) for s in range(3000)])
    s = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "x", "max_points": 100}).json()["data"][0]
    assert s["total_points"] == 3000 and len(s["steps"]) <= 100 and max(s["values"]) == 12.0


def test_newest_answers_of_many_runs(client):
    a, b, c = external_run(client), external_run(client), external_run(client)
    for run, newest in ((a, 4), (b, 2)):
        samples = [{"step": step, "sample_index": i, "prompt": "p", "response": f"r{step}-{i}", "tokens": ["r"]}
                   for step in range(1, newest + 1) for i in range(3)]
        samples.append({"step": newest + 5, "split": "val", "sample_index": 0, "response": "val"})
        assert client.post(f"{API}/runs/{run['id']}/samples", json={"samples": samples},
                           headers=auth(run)).status_code == 200
    got = client.get(f"{API}/samples/newest", params={"run_id": [a["id"], b["id"], c["id"]], "limit": 2}).json()
    assert [(x["run_id"], x["step"], x["response"]) for x in got["data"]] == [
        (a["id"], 4, "r4-0"), (a["id"], 4, "r4-1"), (b["id"], 2, "r2-0"), (b["id"], 2, "r2-1")]
    assert "prompt" not in got["data"][0] and got["data"][0]["tokens"] == ["r"]
    val = client.get(f"{API}/samples/newest", params={"run_id": a["id"], "split": "val"}).json()["data"]
    assert [(x["step"], x["response"]) for x in val] == [(9, "val")]


def test_one_request_for_a_page_of_charts_with_key_patterns(client):
    a, b = external_run(client), external_run(client)
    for run, keys in ((a, ["critic/score/mean", "val-core/arith/reward/mean@1", "actor/pg_loss"]),
                      (b, ["val-core/gsm8k/reward/mean@1", "val-core/gsm8k/reward/std@1", "timing_s/gen"])):
        client.post(f"{API}/runs/{run['id']}/metrics", headers=auth(run),
                    json={"points": [{"key": k, "step": 1, "value": 1.0} for k in keys]})
    got = client.get(f"{API}/metrics", params={"run_id": [a["id"], b["id"]], "key": ["actor/pg_loss"],
                                               "key_pattern": [r"^val-core\/.+\/reward\/mean@\d+$"]}).json()["data"]
    assert sorted((s["run_id"], s["key"]) for s in got) == [
        (a["id"], "actor/pg_loss"), (a["id"], "val-core/arith/reward/mean@1"), (b["id"], "val-core/gsm8k/reward/mean@1")]
    only = client.get(f"{API}/metrics", params={"run_id": b["id"], "key_pattern": ["^timing_s/(?!step$)"]}).json()
    assert [s["key"] for s in only["data"]] == ["timing_s/gen"]
    assert client.get(f"{API}/metrics", params={"run_id": a["id"], "key_pattern": ["("]}).status_code == 422
    assert client.get(f"{API}/metrics", params={"run_id": a["id"], "key_pattern": ["^(a+)+$"]}).status_code == 422
    assert client.get(f"{API}/metrics", params={"run_id": a["id"]}).status_code == 422
