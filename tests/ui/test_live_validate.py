"""The New run form checks the whole config as the user edits (POST /config/validate, the server's own gate, once
the typing pauses): a combination of keys the engine refuses shows at the key it names, before anything is sent to
launch, and goes away once the combination is fixed."""
from __future__ import annotations

from playwright.sync_api import expect

from tests.ui.conftest import shot


def test_a_refused_combination_shows_at_its_key_as_the_user_edits(page, server):
    before = server.api.get("/api/v1/runs")["count"]
    page.goto(server.url + "/runs/new?preset=demo")
    expect(page.locator('[data-preset="demo"]')).to_have_attribute("aria-pressed", "true")
    batch = page.locator('[data-key="data.train_batch_size"]')
    expect(batch).to_have_value("32")  # the demo's mini-batch is 32 prompts too
    field_error = page.locator('[data-field="data.train_batch_size"] .field-error')
    live = page.locator("[data-live-errors]")
    expect(field_error).to_have_count(0)

    batch.fill("48")  # a single field's rules hold (an integer ≥ 1); the combination does not
    expect(field_error).to_contain_text("must be a multiple of actor_rollout_ref.actor.ppo_mini_batch_size (32)")
    expect(live).to_contain_text("data.train_batch_size: data.train_batch_size (48) must be a multiple of")
    shot(page, "new-run-live-validate")

    batch.fill("64")  # fixed: the error goes as it came
    expect(field_error).to_have_count(0)
    expect(live).to_have_count(0)
    assert server.api.get("/api/v1/runs")["count"] == before  # checked, nothing launched
    assert not page.errors
