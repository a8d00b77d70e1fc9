"""The newcomer's path end to end: launch the tiny demo run from the New-run form on a server with real Ray
dispatch (the server starts its own local Ray head), watch its charts appear and grow while it trains, open
the samples of a step, put two steps side by side, and compare it with a second run (config diff).
Slow (a real training job on CPU): marked `slow`."""
from __future__ import annotations

import os
import re

import pytest
from playwright.sync_api import expect

from tests.ui.conftest import shot

pytestmark = pytest.mark.slow

STEPS = int(os.environ.get("RLSTUDIO_UI_LAUNCH_STEPS", "6"))


def points(page, chart="score") -> int:
    return int(page.locator(f'[data-chart="{chart}"]').get_attribute("data-points") or 0)


def test_launch_demo_from_form_watch_samples_side_by_side_compare(page, dispatch_server):
    srv = dispatch_server
    page.goto(srv.url + "/runs/new")
    expect(page.locator('[data-preset="demo_ppo"]')).to_have_attribute("aria-pressed", "true")  # the first demo
    page.locator("#run-name").fill("demo-from-form")
    page.locator('[data-key="trainer.total_training_steps"]').fill(str(STEPS))
    page.get_by_role("button", name="Launch run").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+$"))
    run_id = int(page.url.rsplit("/", 1)[1])
    # any status of a live or finished run (a fast machine may finish 6 steps before the page looks)
    expect(page.locator("h1 [data-status]")).to_have_text(re.compile("queued|starting|running|succeeded"))

    # charts appear, then grow while it trains (SSE → extendTraces); a failed job fails the test with its error
    page.wait_for_function("""() => document.querySelector('[data-chart="score"]') ||
        ['failed', 'lost', 'cancelled'].includes(document.querySelector('h1 [data-status]')?.textContent)""",
                           timeout=400_000, polling=500)
    status = page.locator("h1 [data-status]").text_content()
    if status in ("failed", "lost", "cancelled"):
        run = srv.api.get(f"/api/v1/runs/{run_id}")
        shot(page, "launch-failed")
        pytest.fail(f"the launched run {status}: {run.get('error')}\n{srv.diagnostics()}")
    first = points(page)
    shot(page, "launch-running")
    page.wait_for_function(
        f"() => Number(document.querySelector('[data-chart=\"score\"]').dataset.points) > {first}"
        " || document.querySelector('h1 [data-status]').textContent === 'succeeded'", timeout=400_000)
    expect(page.locator("h1 [data-status]")).to_have_text("succeeded", timeout=400_000)
    assert points(page) > first or first >= STEPS
    shot(page, "launch-succeeded")

    run = srv.api.get(f"/api/v1/runs/{run_id}")
    assert run["progress_step"] == STEPS
    steps = sorted({s["step"] for s in srv.api.get(f"/api/v1/runs/{run_id}/samples/steps")["data"] if s["split"] == "train"})
    assert len(steps) >= 2, steps

    # the samples of a step
    page.goto(f"{srv.url}/runs/{run_id}/samples?step={steps[0]}")
    expect(page.locator(".sample-card").first).to_be_visible()
    shot(page, "launch-samples")

    # side by side of two steps that answered the same prompts: the validation before training (step 0) and
    # the one after the last step (training steps draw different prompts from the 5,000)
    val_steps = sorted({s["step"] for s in srv.api.get(f"/api/v1/runs/{run_id}/samples/steps")["data"]
                        if s["split"] == "val"})
    assert val_steps[0] == 0 and val_steps[-1] == STEPS, val_steps
    page.goto(f"{srv.url}/side-by-side?a={run_id}:{val_steps[0]}&b={run_id}:{val_steps[-1]}&split=val")
    expect(page.locator("[data-row]").first).to_be_visible()
    page.keyboard.press("ArrowRight")
    expect(page).to_have_url(re.compile(r"[?&]p=1(&|$)"))
    shot(page, "launch-side-by-side")

    # a second run (recorded through the API with another learning rate), then compare: the config diff
    other = srv.api.external_run("demo-other-lr", overrides=["actor_rollout_ref.actor.optim.lr=3e-4",
                                                             f"trainer.total_training_steps={STEPS}"])
    srv.api.status(other, "succeeded")
    page.goto(f"{srv.url}/compare?runs={run_id},{other['id']}")
    expect(page.locator('.diff-table tr[data-key="actor_rollout_ref.actor.optim.lr"]')).to_be_visible()
    expect(page.locator('[data-chart="score"]')).to_be_visible()
    shot(page, "launch-compare")
    assert not page.errors


def test_launch_calculator_preset_from_form_shows_conversations(page, dispatch_server):
    """Issue 17: the multi-turn preset launched from the New-run form trains (Ray job, the calculator in the agent
    loop) and its trajectories are browsable as conversations."""
    srv = dispatch_server
    page.goto(srv.url + "/runs/new?preset=calculator_multi_turn")
    expect(page.locator('[data-preset="calculator_multi_turn"]')).to_have_attribute("aria-pressed", "true")
    page.locator("#run-name").fill("calculator-from-form")
    page.locator('[data-key="trainer.total_training_steps"]').fill("2")
    page.get_by_role("button", name="Launch run").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+$"))
    run_id = int(page.url.rsplit("/", 1)[1])
    page.wait_for_function("() => ['succeeded', 'failed', 'lost', 'cancelled']"
                           ".includes(document.querySelector('h1 [data-status]')?.textContent)",
                           timeout=400_000, polling=500)
    run = srv.api.get(f"/api/v1/runs/{run_id}")
    if run["status"] != "succeeded":
        pytest.fail(f"the launched run {run['status']}: {run.get('error')}\n{srv.diagnostics()}")
    called = srv.api.get(f"/api/v1/runs/{run_id}/samples?split=train&uses_tool=true&limit=1")
    assert called["count"] > 0 and called["data"][0]["num_turns"] >= 3
    step = called["data"][0]["step"]
    page.goto(f"{srv.url}/runs/{run_id}/samples?step={step}&tool=*")
    card = page.locator(".sample-card").first
    expect(card.locator("[data-role=model]").first).to_be_visible()
    expect(card.locator("[data-role=tool]").first).to_contain_text("calculator")
    expect(card.locator(".tool-call").first).to_contain_text("calculator(expression=")
    shot(page, "launch-calculator-conversations")
