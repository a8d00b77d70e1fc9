"""Health alarms on the Runs table and the Run page (incl. degenerate answers in the newest samples), and the
API-token settings against a server that requires a token."""
from __future__ import annotations

import random

import pytest
from playwright.sync_api import expect

from tests.ui.conftest import Server, shot
from tests.ui.seed import step_metrics, step_samples

TOKEN = "ui-test-token-1234"


def test_degenerate_answers_badge_and_banner(page, server):
    rng = random.Random(7)
    healthy = server.api.external_run("answers-fine", tags=["health"])
    broken = server.api.external_run("answers-degenerate", tags=["health"])
    for run in (healthy, broken):
        server.api.metrics(run, [p for s in (1, 2, 3) for p in step_metrics(s, 10, rng)])
        server.api.samples(run, step_samples(2, rng) + step_samples(3, rng))
    # at its newest step, half the answers of the second run are empty or one token over and over
    bad = step_samples(4, rng)
    for i, s in enumerate(bad[:8]):
        s["response"] = "" if i % 2 else " ".join(["7"] * 12)
        s["tokens"] = [] if i % 2 else ["7"] * 12
    server.api.samples(broken, bad)
    server.api.samples(healthy, step_samples(4, rng))
    for run in (healthy, broken):
        server.api.status(run, "succeeded")

    page.goto(server.url + "/?tag=health")
    row = page.locator(f'tr[data-run-id="{broken["id"]}"]')
    badge = row.get_by_role("link", name="Degenerate answers")
    expect(badge).to_be_visible()  # the table fills in after its queries
    title = badge.get_attribute("title")
    assert "8 of 16 answers at step 4" in title and "4 empty" in title and "4 repetitive" in title
    expect(page.locator(f'tr[data-run-id="{healthy["id"]}"]')).to_contain_text("healthy")
    shot(page, "runs-table-degenerate")
    badge.click()  # the badge leads to the samples of that step
    expect(page).to_have_url(f"{server.url}/runs/{broken['id']}/samples?step=4")
    # the Run page says it too, in its banner, with the same link
    page.goto(f"{server.url}/runs/{broken['id']}")
    banner = page.locator(".alarm-banner")
    expect(banner).to_contain_text("Degenerate answers")
    expect(banner.get_by_role("link", name="samples of step 4 →")).to_have_attribute(
        "href", f"/runs/{broken['id']}/samples?step=4")
    page.goto(f"{server.url}/runs/{healthy['id']}")
    expect(page.locator('[data-chart="score"]')).to_be_visible()
    expect(page.locator(".alarm-banner")).to_have_count(0)
    assert not page.errors


@pytest.fixture(scope="module")
def secured_server(tmp_path_factory, built_frontend):
    srv = Server(tmp_path_factory.mktemp("rlstudio-ui-token"), dispatch=False,
                 extra_env={"RLSTUDIO_API_TOKEN": TOKEN})
    yield srv
    srv.stop()


def test_api_token_settings(page, secured_server):
    srv = secured_server
    srv.api.external_run("behind-a-token")
    page.goto(srv.url + "/")
    error = page.locator(".state-error")
    expect(error).to_contain_text("set it in Settings")  # every call is refused without the token
    error.get_by_role("link", name="set it in Settings").click()
    expect(page).to_have_url(srv.url + "/settings")
    field = page.get_by_label("API token")
    field.fill("not-the-token")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".token-error")).to_contain_text("refused")
    field.fill(TOKEN)
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".token-ok")).to_contain_text("accepts it")
    assert page.evaluate("localStorage.getItem('rlstudio.apiToken')") == TOKEN
    shot(page, "settings-token")
    page.get_by_role("link", name="Go to the runs →").click()
    expect(page.locator("tr[data-run-id]")).to_have_count(1)
    expect(page.locator("tr[data-run-id]")).to_contain_text("behind-a-token")
    expect(page.get_by_text("● live")).to_be_visible()  # the live feed passes the token too
    page.reload()  # kept across loads
    expect(page.locator("tr[data-run-id]")).to_contain_text("behind-a-token")
    page.goto(srv.url + "/settings")
    page.get_by_role("button", name="Forget").click()
    expect(page.locator("[data-token-state]")).to_have_attribute("data-token-state", "unset")
    assert page.evaluate("localStorage.getItem('rlstudio.apiToken')") is None
    page.goto(srv.url + "/")
    expect(page.locator(".state-error")).to_contain_text("set it in Settings")
    assert not page.errors
