"""The Import page (frontend/src/pages/import): a verl run's files, written by verl's own code
(tests/verl_files.py), uploaded in Chromium; the imported run then sits in the runs table and on Compare beside an
rlstudio run. A bad file shows the server's message naming the line, and nothing is stored."""
from __future__ import annotations

import random
import time

from playwright.sync_api import expect

from tests.ui.conftest import shot
from tests.ui.seed import step_metrics
from tests.verl_files import verl_run


def rlstudio_run(api, name: str) -> dict:
    rng = random.Random(5)
    run = api.external_run(name, tags=["ui"], experiment="ui-import")
    t0 = time.time() - 600
    api.metrics(run, [p for s in range(1, 7) for p in step_metrics(s, 6, rng, wall=t0 + 3 * s)])
    api.status(run, "succeeded")
    return run


def test_a_verl_jsonl_imported_in_the_ui_shows_on_compare_beside_an_rlstudio_run(page, server, tmp_path):
    ours = rlstudio_run(server.api, "ours-grpo")
    files = verl_run(tmp_path / "verl", steps=6)
    page.goto(server.url + "/")
    page.get_by_role("link", name="Import").click()
    expect(page).to_have_url(f"{server.url}/runs/import")

    # a bad file first: the server's words (file, line), nothing stored
    runs_before = server.api.get("/api/v1/runs?limit=500")["count"]
    broken = tmp_path / "broken.jsonl"
    lines = files["metrics"].read_text().splitlines()
    broken.write_text("\n".join([lines[0], '{"step": 2, "data": {"critic/score/mean": 0.2', *lines[2:]]) + "\n")
    page.get_by_label("Metrics (JSONL)").set_input_files(str(broken))
    page.get_by_role("button", name="Import").click()
    alert = page.locator("[data-import-error]")
    expect(alert).to_contain_text("broken.jsonl line 2: not JSON")
    expect(alert).to_have_attribute("data-import-error", "metrics")
    assert server.api.get("/api/v1/runs?limit=500")["count"] == runs_before

    # the whole run: metrics, config, both dumps
    page.get_by_label("Metrics (JSONL)").set_input_files(str(files["metrics"]))
    page.get_by_label("Config").set_input_files(str(files["config"]))
    page.get_by_label("Rollout dumps").set_input_files([str(p) for p in files["rollout"]])
    page.get_by_label("Validation dumps").set_input_files([str(p) for p in files["validation"]])
    page.get_by_label("experiment").fill("ui-import")
    page.get_by_role("button", name="Import").click()
    done = page.locator("[data-imported-run]")
    expect(done).to_contain_text("qwen_gsm8k_grpo")
    expect(done).to_contain_text("6 steps")
    expect(done).to_contain_text("36 train, 4 val")
    imported = int(done.get_attribute("data-imported-run"))
    shot(page, "import-done")

    # the runs table, then Compare with the rlstudio run
    done.get_by_role("link", name="See it among the runs").click()
    page.get_by_label("select ours-grpo").check()
    page.get_by_label("select qwen_gsm8k_grpo").check()
    page.get_by_role("button", name="Compare (2)").click()
    expect(page).to_have_url(f"{server.url}/compare?runs={ours['id']},{imported}")
    expect(page.locator('[data-chart="score"]')).to_be_visible()
    summary = page.locator(".summary-table")
    expect(summary.locator("thead")).to_contain_text("ours-grpo")
    expect(summary.locator("thead")).to_contain_text("qwen_gsm8k_grpo")
    score = summary.locator("tbody tr", has_text="critic/score/mean")
    expect(score.locator("td").nth(3)).to_have_text("0.6")  # the imported run's final score (verl's step 6)
    expect(summary.locator("tbody tr", has_text="val-core/openai/gsm8k/reward/mean@1")).to_be_visible()
    expect(page.locator('.diff-table tr[data-key="actor_rollout_ref.model.path"]')).to_contain_text("Qwen/Qwen2.5-0.5B-Instruct")
    shot(page, "import-compare")
    # the imported answers are on its Samples page
    page.goto(f"{server.url}/runs/{imported}/samples")
    expect(page.get_by_text("What is 1 + 1?").first).to_be_visible()
    assert not page.errors
