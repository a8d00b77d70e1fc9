"""Live charts while a run trains (issue 35): after every step that streams in, every line the run page draws is
the API's series, point for point. Steps arrive through the ingest API, one or two a request, as the engine's
dashboard logger sends them; the page appends them to its traces (Plotly.extendTraces) without a reload."""
from __future__ import annotations

import random
import time

import pytest
from playwright.sync_api import expect

from tests.ui.conftest import HANG_GUARD_MS, shot
from tests.ui.seed import step_metrics
from tests.waiting import wait_for

VAL_KEY = "val-core/arith/reward/mean@1"

# every line of every metric chart as Plotly drew it: the trace's points after Plotly's own calculation
# (gd.calcdata), what it holds (gd.data: x and y must be as long as each other) and what it draws (meta: "run|key")
DRAWN = """() => [...document.querySelectorAll('[data-chart] .plot')].flatMap((gd) => (gd.data || []).map((t, i) => ({
    chart: gd.closest('[data-chart]').dataset.chart, name: t.name, meta: t.meta ?? null,
    xLen: t.x.length, yLen: t.y.length,
    points: (gd.calcdata?.[i] || []).map((p) => [p.x, p.y === undefined ? null : p.y]),
})))"""


def api_series(api, run_id: int) -> dict[str, list[tuple[int, float]]]:
    body = api.get(f"/api/v1/runs/{run_id}/metrics?max_points=1000")
    assert not any(s["downsampled"] for s in body["data"])
    return {s["key"]: list(zip(s["steps"], s["values"])) for s in body["data"]}


def mismatches(page, api, run_id: int, *, smoothed: bool = False) -> list[str]:
    """What the page draws that the API's series does not say (empty: every line is right)."""
    series = api_series(api, run_id)
    out = []
    lines = [t for t in page.evaluate(DRAWN) if t["meta"]]
    if not lines:
        return ["no lines drawn yet"]
    for t in lines:
        rid, key = t["meta"].split("|", 1)
        assert int(rid) == run_id, t["meta"]
        want = series.get(key)
        if want is None:
            out.append(f"{t['chart']}: {t['name']} draws {key}, which the API does not have")
            continue
        if t["xLen"] != t["yLen"]:
            out.append(f"{t['chart']}: {t['name']} holds {t['xLen']} x and {t['yLen']} y values")
        got = t["points"]
        if smoothed and not t["name"].endswith(" (raw)"):  # the EMA line: the same steps, its own values
            if [x for x, _ in got] != [s for s, _ in want]:
                out.append(f"{t['chart']}: {t['name']} (smoothed) at steps {[x for x, _ in got]}, API {[s for s, _ in want]}")
            continue
        if len(got) != len(want) or any(x != s or y != pytest.approx(v, rel=1e-9, abs=1e-12) for (x, y), (s, v) in zip(got, want)):
            out.append(f"{t['chart']}: {t['name']} drawn {got}\n    API {want}")
    return out


def wait_drawn_as_api(page, api, run_id: int, what: str, **kw) -> None:
    """Wait until the page draws exactly the API's series (a wrong chart stays wrong: this then fails naming it)."""
    last: list[str] = []

    def right():
        nonlocal last
        last = mismatches(page, api, run_id, **kw)
        return not last

    try:
        wait_for(right, timeout=HANG_GUARD_MS / 1000, interval=0.25, what=what)
    except AssertionError:
        raise AssertionError(f"{what}: the charts differ from the API:\n" + "\n".join(last[:12])) from None


def post_steps(api, run, steps: list[int], rng: random.Random, total: int) -> None:
    points = []
    for s in steps:
        points += step_metrics(s, total, rng)
        if s % 4 == 0:
            points.append({"key": VAL_KEY, "step": s, "value": 0.1 + 0.002 * s, "wall_time": time.time()})
    api.metrics(run, points)


def test_live_charts_draw_the_api_series_while_a_run_trains(page, server):
    api = server.api
    rng = random.Random(35)
    total = 20
    run = api.external_run("live-drawn", tags=["ui"])
    api.metrics(run, [{"key": VAL_KEY, "step": 0, "value": 0.1, "wall_time": time.time()}])
    post_steps(api, run, [1, 2, 3, 4], rng, total)  # history the page fetches
    page.goto(f"{server.url}/runs/{run['id']}")
    expect(page.locator('[data-chart="score"] .plot[data-ready="true"]')).to_be_visible()
    wait_drawn_as_api(page, api, run["id"], "the history")
    lines = [t for t in page.evaluate(DRAWN) if t["meta"]]
    assert {t["meta"].split("|", 1)[1] for t in lines} >= {"critic/score/mean", "actor/entropy", VAL_KEY, "critic/vf_loss"}
    # the run trains on: a step a request, then two in one (the logger's 1 s batches), each checked as it lands
    for steps in ([5], [6], [7], [8], [9, 10], [11], [12]):
        post_steps(api, run, steps, rng, total)
        wait_drawn_as_api(page, api, run["id"], f"step {steps[-1]}")
    drawn = {t["meta"]: t for t in page.evaluate(DRAWN) if t["meta"]}
    assert [x for x, _ in drawn[f"{run['id']}|{VAL_KEY}"]["points"]] == [0, 4, 8, 12]
    assert [x for x, _ in drawn[f"{run['id']}|critic/score/mean"]["points"]] == list(range(1, 13))
    shot(page, "live-charts")

    # smoothing on: the raw lines are the API's, the smoothed ones on the same steps, while more steps arrive
    page.goto(f"{server.url}/runs/{run['id']}?smooth=0.6")
    expect(page.locator('[data-chart="score"] .plot[data-ready="true"]')).to_be_visible()
    wait_drawn_as_api(page, api, run["id"], "smoothed history", smoothed=True)
    for s in (13, 14, 15, 16):
        post_steps(api, run, [s], rng, total)
        wait_drawn_as_api(page, api, run["id"], f"smoothed, step {s}", smoothed=True)

    # the mode bar comes with the pointer (the first draw goes without it), and clicks still open a step's samples
    score = page.locator('[data-chart="score"] .plot')
    expect(score.locator(".modebar")).to_have_count(0)
    score.hover()
    expect(score.locator(".modebar")).to_have_count(1)
    post_steps(api, run, [17], rng, total)  # still appended to, after the redraw that brought the bar
    wait_drawn_as_api(page, api, run["id"], "step 17, after the mode bar", smoothed=True)
    score.evaluate("gd => gd.emit('plotly_click', {points: [{x: 3, y: 0.5, customdata: 3, data: {name: gd.data[1].name}}]})")
    expect(page).to_have_url(f"{server.url}/runs/{run['id']}/samples?step=3")
    api.status(run, "succeeded")  # the session's server is shared: leave no run training
    assert not page.errors
