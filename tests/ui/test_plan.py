"""The run's plan on the run page: what the job decided at its start (engine/config/plan.py: the device of
trainer.device=auto, local paths, micro-batches sized from memory), reported with its `started` status by its own
dashboard logger and shown beside the resolved config, which stays as the server stored it."""
from __future__ import annotations

from playwright.sync_api import expect

from tests.ui.conftest import shot
from tests.ui.test_lora import started

PLAN = [
    {"key": "trainer.device", "value": "cuda", "was": "auto", "why": "trainer.device=auto: a CUDA device is visible",
     "by": "driver"},
    {"key": "actor_rollout_ref.actor.use_dynamic_bsz", "value": True, "was": False, "by": "worker",
     "why": "auto micro-batch (60 GB for activations): actor_update: 32768 tokens; actor gradient checkpointing off"},
    {"key": "actor_rollout_ref.model.enable_gradient_checkpointing", "value": False, "was": True, "by": "worker",
     "why": "auto micro-batch (60 GB for activations): actor_update: 32768 tokens; actor gradient checkpointing off"},
]


def test_run_page_shows_the_plan_beside_the_config(page, server, tmp_path):
    run = server.api.external_run("plan-facts", tags=["ui"])
    page.goto(f"{server.url}/runs/{run['id']}")
    expect(page.locator("h1 [data-status]")).to_have_text("running")
    expect(page.locator("[data-plan]")).to_have_count(0)  # nothing decided yet
    started(server, run, tmp_path, plan=PLAN)  # arrives live, with the run's status event
    checkpointing = page.locator('[data-plan-key="actor_rollout_ref.model.enable_gradient_checkpointing"]')
    expect(checkpointing).to_contain_text("auto (worker): actor_rollout_ref.model.enable_gradient_checkpointing = false")
    expect(checkpointing).to_contain_text("(was true), because auto micro-batch (60 GB for activations)")
    expect(page.locator('[data-plan-key="trainer.device"]')).to_contain_text(
        "auto (driver): trainer.device = cuda (was auto), because trainer.device=auto")
    shot(page, "run-plan")
    # kept with the run; the config the page shows beside it is the stored one, not rewritten
    stored = server.api.get(f"/api/v1/runs/{run['id']}")
    assert stored["facts"]["plan"] == PLAN
    assert stored["resolved_config"]["trainer"]["device"] == "auto"
    page.reload()
    expect(page.locator("[data-plan] li")).to_have_count(len(PLAN))
    assert not page.errors
