"""Run management and downloads in Chromium on a real server: rename, tags, notes, archive (hidden from the
runs list), delete (refused while running, confirmed), and the metrics / samples files the UI downloads."""
from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path

import pandas as pd
from playwright.sync_api import expect

from tests.ui.conftest import shot
from tests.ui.seed import step_metrics, step_samples


def test_rename_tags_notes_archive_delete(page, server):
    run = server.api.external_run("manage-me", tags=["ui"])  # running: it may still write
    page.goto(f"{server.url}/runs/{run['id']}")
    manage = page.get_by_role("region", name="manage run")
    delete = manage.get_by_role("button", name="Delete…")
    expect(delete).to_be_disabled()
    manage.get_by_label("Name").fill("renamed-run")
    manage.get_by_label("Tags").fill("lr-sweep, baseline, lr-sweep")
    manage.get_by_label("Notes").fill("lr 1e-4 diverged at step 40")
    manage.get_by_role("button", name="Save").click()
    expect(page.locator("h1")).to_contain_text("renamed-run")
    got = server.api.get(f"/api/v1/runs/{run['id']}")
    assert (got["name"], got["tags"], got["notes"]) == ("renamed-run", ["lr-sweep", "baseline"], "lr 1e-4 diverged at step 40")
    # archive: gone from the runs list unless asked for
    page.get_by_role("region", name="manage run").get_by_role("button", name="Archive").click()
    expect(page.get_by_role("region", name="manage run").get_by_role("button", name="Unarchive")).to_be_visible()
    assert server.api.get(f"/api/v1/runs/{run['id']}")["tags"] == ["lr-sweep", "baseline", "archived"]
    page.goto(server.url + "/")
    expect(page.locator(".state-loading")).to_have_count(0)
    expect(page.locator(f'tr[data-run-id="{run["id"]}"]')).to_have_count(0)
    page.get_by_label("show archived").check()
    expect(page.locator(f'tr[data-run-id="{run["id"]}"]')).to_contain_text("renamed-run")
    # delete, once it has finished, after a confirmation
    server.api.status(run, "succeeded")
    page.goto(f"{server.url}/runs/{run['id']}")
    delete = page.get_by_role("region", name="manage run").get_by_role("button", name="Delete…")
    expect(delete).to_be_enabled()
    messages: list[str] = []
    page.once("dialog", lambda d: (messages.append(d.message), d.accept()))
    delete.click()
    expect(page).to_have_url(server.url + "/")
    assert messages and "cannot be undone" in messages[0]
    runs = server.api.get("/api/v1/runs?limit=1000")["data"]
    assert run["id"] not in [r["id"] for r in runs]
    assert not page.errors


def test_downloads_metrics_and_filtered_samples(page, server):
    rng = random.Random(11)
    run = server.api.external_run("download-me", tags=["ui"])
    server.api.metrics(run, [p for s in range(1, 6) for p in step_metrics(s, 10, rng)])
    server.api.samples(run, step_samples(2, rng) + step_samples(4, rng))
    server.api.status(run, "succeeded")
    page.goto(f"{server.url}/runs/{run['id']}/samples?step=4&min=1")
    expect(page.locator(".sample-card").first).to_be_visible()
    shown = page.locator(".sample-card").count()
    page.locator(".download-menu summary").click()
    with page.expect_download() as info:
        page.get_by_role("menuitem", name="Step 4, as filtered, CSV").click()
    download = info.value
    assert download.suggested_filename == f"run-{run['id']}-samples-step-4.csv"
    frame = pd.read_csv(download.path())
    assert len(frame) == shown and set(frame["step"]) == {4} and (frame["score"] >= 1).all()
    assert isinstance(json.loads(frame["old_log_probs"][0]), list)
    with page.expect_download() as info:
        page.get_by_role("menuitem", name="Every train step, as filtered, JSONL").click()
    lines = [json.loads(line) for line in Path(info.value.path()).read_text().splitlines()]
    assert {r["step"] for r in lines} == {2, 4} and all(r["score"] >= 1 for r in lines)
    page.goto(f"{server.url}/runs/{run['id']}")
    page.locator(".download-menu summary").click()
    with page.expect_download() as info:
        page.get_by_role("menuitem", name=re.compile("Metrics as CSV")).click()
    metrics = pd.read_csv(io.BytesIO(Path(info.value.path()).read_bytes()))
    assert list(metrics["step"]) == [1, 2, 3, 4, 5] and "critic/score/mean" in metrics.columns
    shot(page, "run-downloads")
    assert not page.errors
