"""Exact mode in the browser (issue 39): a run with actor_rollout_ref.rollout.exact=True whose steps logged the exact
check (exact/mismatched_tokens 0, as engine/trainer/rollout_mismatch.exact_metrics reports it) shows "exact: 0" on
its Run page; a default run shows no such fact; Compare sets the two side by side and lists the key among the config
differences."""
from __future__ import annotations

import random

from playwright.sync_api import expect

from tests.ui.conftest import shot
from tests.ui.seed import step_metrics


def _plant(server, name: str, overrides: list[str], exact_points: bool) -> dict:
    run = server.api.external_run(name, overrides=overrides, tags=["ui"])
    rng = random.Random(0)
    points = []
    for step in (1, 2, 3):
        points += step_metrics(step, 3, rng)
        if exact_points:
            points += [{"key": "exact/mismatched_tokens", "step": step, "value": 0.0},
                       {"key": "exact/checked_tokens", "step": step, "value": 200.0 + step},
                       {"key": "training/rollout_probs_diff_max", "step": step, "value": 0.0}]
    server.api.metrics(run, points)
    return run


def test_exact_run_shows_exact_zero_and_compare_lists_the_key(page, server):
    exact = _plant(server, "exact-run", ["actor_rollout_ref.rollout.exact=True"], True)
    default = _plant(server, "default-run", [], False)

    page.goto(f"{server.url}/runs/{exact['id']}")
    fact = page.locator("[data-fact=exact]")
    expect(fact).to_have_text("exact: 0")
    assert "3 steps" in fact.get_attribute("title") and "606 tokens checked" in fact.get_attribute("title")
    shot(page, "run-exact-fact")

    page.goto(f"{server.url}/runs/{default['id']}")
    expect(page.locator(".run-meta")).to_be_visible()
    expect(page.locator("[data-fact=exact]")).to_have_count(0)

    page.goto(f"{server.url}/compare?runs={exact['id']},{default['id']}")
    row = page.locator("tr[data-key='actor_rollout_ref.rollout.exact']")
    expect(row).to_be_visible()
    expect(row.locator("td").nth(1)).to_have_text("true")
    expect(row.locator("td").nth(2)).to_have_text("false")
