"""Run health as the server judges it, seen on the Runs table and the Run page (a KL blow-up sent while the page
is open, degenerate answers in the newest samples: planted through the ingest API as a logger would send them),
and the API-token settings against a server that requires a token. The browser computes no alarm: every title,
step and number checked on screen is read back from GET /runs/{id}/health."""
from __future__ import annotations

import random
import re

import pytest
from playwright.sync_api import expect

from tests.ui.conftest import Server, shot
from tests.ui.seed import step_metrics, step_samples

TOKEN = "ui-test-token-1234"


def correct_start(points: list[dict]) -> list[dict]:
    """A correct setup's first step: the reference is the initial actor, so KL to it is 0 (the server checks)."""
    for p in points:
        if p["step"] == 1 and p["key"] == "actor/reward_kl_penalty":
            p["value"] = 0.0
    return points


def validation_n4(step: int) -> list[dict]:
    """One validation's statistics as engine/trainer/validation_metrics.py logs them for N = 4 answers per prompt,
    with an `acc` and a `pred` column: the core variable is acc."""
    gain = 0.05 * step
    values = {"val-core/arith/acc/mean@4": 0.3 + gain, "val-core/arith/acc/best@4/mean": 0.6 + gain,
              "val-core/arith/acc/maj@4/mean": 0.35 + gain, "val-aux/arith/acc/best@2/mean": 0.45 + gain,
              "val-aux/arith/acc/std@4": 0.2, "val-aux/arith/acc/worst@4/mean": 0.1,
              "val-aux/arith/reward/mean@4": 0.3 + gain, "val-aux/arith/reward/best@4/mean": 0.6 + gain}
    return [{"key": k, "step": step, "value": v} for k, v in values.items()]


def health(server, run) -> dict:
    return server.api.get(f"/api/v1/runs/{run['id']}/health")


def alarm_of(state: dict, alarm_id: str) -> dict:
    return next(a for a in state["alarms"] if a["id"] == alarm_id)


def samples_link(run: dict, samples: dict) -> re.Pattern:
    """The banner's link: the Samples view at the alarm's step (its filter, turned into the page's parameters
    by lib/health.ts samplesHref, is that unit's business)."""
    return re.compile(rf"^/runs/{run['id']}/samples\?step={samples['step']}(&|$)")


def test_kl_blow_up_banner_and_runs_badge_from_the_server(page, server):
    rng = random.Random(11)
    run = server.api.external_run("kl-blow-up", tags=["health-kl"])
    server.api.status(run, "running")
    server.api.metrics(run, correct_start([p for s in range(1, 11) for p in step_metrics(s, 30, rng)]))
    page.goto(f"{server.url}/runs/{run['id']}")
    panel = page.locator("#health")
    expect(panel).to_have_attribute("data-checked-step", "10")  # the server judged the planted steps
    kl_alarm = panel.locator('.alarm[data-alarm-id="kl-high"]')
    expect(kl_alarm).to_have_count(0)

    # steps 11-16 with KL about 10x the band's top, sent while the page is open: the banner follows the stream
    server.api.metrics(run, [p for s in range(11, 17) for p in step_metrics(s, 30, rng, kl_scale=1.0)])
    expect(kl_alarm).to_have_attribute("data-since-step", "11")
    expect(panel).to_have_attribute("data-checked-step", "16")
    kl = alarm_of(health(server, run), "kl-high")
    assert kl["state"] == "firing" and kl["since_step"] == 11, kl
    expect(kl_alarm).to_contain_text(kl["title"])
    expect(kl_alarm).to_contain_text("since step 11")
    expect(kl_alarm).to_contain_text(kl["detail"])
    for name in kl["values"]:  # the numbers that triggered it
        expect(kl_alarm.locator(".alarm-values")).to_contain_text(name)
    # the answers that show it: the server's pick, else those of the step it began
    expect(kl_alarm.get_by_role("link")).to_have_attribute(
        "href", samples_link(run, kl["samples"] or {"step": kl["since_step"]}))
    shot(page, "run-health-kl-high")

    # the Runs table's badge is the runs list's summary of the same state
    page.goto(server.url + "/?tag=health-kl")
    row = page.locator(f'tr[data-run-id="{run["id"]}"]')
    badge = row.locator('[data-alarm-id="kl-high"]')
    expect(badge).to_have_text("kl high")
    listed = next(r for r in server.api.get("/api/v1/runs?tag=health-kl")["data"] if r["id"] == run["id"])
    assert "kl-high" in listed["health"]["firing"], listed["health"]
    shot(page, "runs-table-health-kl-high")
    badge.click()  # to the run page's health panel
    expect(page).to_have_url(f"{server.url}/runs/{run['id']}#health")
    expect(kl_alarm).to_be_visible()

    # KL back in the band: the server clears the alarm; the page lists it quietly with the steps it lasted
    server.api.metrics(run, [p for s in range(17, 27) for p in step_metrics(s, 30, rng)])
    cleared = panel.locator('.health-cleared [data-alarm-id="kl-high"]')
    expect(cleared).to_have_attribute("data-state", "cleared")
    expect(kl_alarm).to_have_count(0)
    kl = alarm_of(health(server, run), "kl-high")
    assert kl["state"] == "cleared", kl
    expect(cleared).to_contain_text(f"steps 11–{kl['cleared_step']}")
    panel.locator(".health-cleared summary").click()
    shot(page, "run-health-kl-cleared")
    # and the Runs table follows (an active run's health is refreshed there)
    page.goto(server.url + "/?tag=health-kl")
    expect(row.locator("[data-health-cell]")).to_be_visible()
    expect(badge).to_have_count(0)
    server.api.status(run, "succeeded")
    assert not page.errors


def test_degenerate_answers_badge_and_banner(page, server):
    rng = random.Random(7)
    healthy = server.api.external_run("answers-fine", tags=["health"])
    broken = server.api.external_run("answers-degenerate", tags=["health"])
    for run in (healthy, broken):
        server.api.metrics(run, correct_start([p for s in (1, 2, 3, 4) for p in step_metrics(s, 10, rng)]))
        server.api.samples(run, step_samples(2, rng) + step_samples(3, rng))
    # at its newest step, half the answers of the second run are empty or one token over and over
    bad = step_samples(4, rng)
    for i, s in enumerate(bad[:8]):
        s["response"] = "" if i % 2 else " ".join(["7"] * 12)
        s["tokens"] = [] if i % 2 else ["7"] * 12
    server.api.samples(broken, bad)
    server.api.samples(healthy, step_samples(4, rng))
    # validation at steps 2 and 4: the healthy run drew 4 answers per prompt (val_kwargs.n=4), the other one
    server.api.metrics(healthy, [p for s in (2, 4) for p in validation_n4(s)])
    server.api.metrics(broken, [{"key": "val-core/arith/reward/mean@1", "step": s, "value": 0.3} for s in (2, 4)])
    for run in (healthy, broken):
        server.api.status(run, "succeeded")

    page.goto(server.url + "/?tag=health")
    row = page.locator(f'tr[data-run-id="{broken["id"]}"]')
    badge = row.locator('[data-alarm-id="degenerate"]')
    expect(badge).to_be_visible()  # the table fills in after its queries
    expect(page.locator(f'tr[data-run-id="{healthy["id"]}"] [data-health-cell]')).to_have_text("healthy")
    shot(page, "runs-table-degenerate")
    badge.click()  # the badge leads to the run page, whose banner says what and where
    expect(page).to_have_url(f"{server.url}/runs/{broken['id']}#health")
    state = alarm_of(health(server, broken), "degenerate")
    assert state["state"] == "firing" and state["samples"]["step"] == 4, state
    alarm = page.locator('.alarm[data-alarm-id="degenerate"]')
    expect(alarm).to_contain_text(state["title"])
    expect(alarm).to_contain_text(state["detail"])
    link = alarm.get_by_role("link", name="samples of step 4 →")
    expect(link).to_have_attribute("href", samples_link(broken, state["samples"]))
    link.click()
    expect(page).to_have_url(re.compile(rf"/runs/{broken['id']}/samples\?step=4"))
    expect(page.locator(".sample-card").first).to_be_visible()  # the answers that show it
    page.goto(f"{server.url}/runs/{healthy['id']}")
    expect(page.locator('[data-chart="score"]')).to_be_visible()
    # the held-out score is the core variable's mean@N (acc here); pass@k has a line per k, then mean@N and maj@N
    expect(page.locator('[data-chart="score"] [data-legend="val-core/arith/acc/mean@4"]')).to_be_visible()
    pass_at_k = page.locator('[data-chart="pass-at-k"]')
    expect(pass_at_k.locator("[data-legend]")).to_have_count(4)
    assert pass_at_k.locator("[data-legend]").evaluate_all("els => els.map(e => e.dataset.legend)") == \
        ["pass@2", "pass@4", "mean@4", "maj@4"]
    assert int(pass_at_k.get_attribute("data-points")) >= 8  # 4 lines x 2 validations (x2 with raw under smoothing)
    expect(pass_at_k.locator(".scatterlayer .trace").first).to_be_attached()  # Plotly drew it
    pass_at_k.scroll_into_view_if_needed()
    shot(page, "run-pass-at-k")
    expect(page.locator("#health")).to_have_attribute("data-health-status", "ok")
    expect(page.locator("#health .alarm")).to_have_count(0)
    page.goto(f"{server.url}/runs/{broken['id']}")  # one answer per prompt: a score, no pass@k
    expect(page.locator('[data-chart="score"] [data-legend="val-core/arith/reward/mean@1"]')).to_be_visible()
    expect(page.locator('[data-chart="pass-at-k"]')).to_have_count(0)
    assert not page.errors


def test_a_failed_step_one_check_stays_in_view_without_a_lasting_badge(page, server):
    """KL 0.05 at step 1 (the reference is not the initial actor): the server fires step1-kl there and closes the
    finding at step 2 (invariant_checks.py); the run page still shows it as a failed setup check, the Runs table
    has no badge for it."""
    rng = random.Random(5)
    run = server.api.external_run("setup-finding", tags=["health-setup"])
    server.api.metrics(run, [p for s in range(1, 6) for p in step_metrics(s, 10, rng)])  # KL > 0 from step 1
    server.api.status(run, "succeeded")
    found = alarm_of(health(server, run), "step1-kl")
    assert (found["state"], found["since_step"], found["cleared_step"]) == ("cleared", 1, 2), found
    page.goto(f"{server.url}/runs/{run['id']}")
    finding = page.locator('#health [data-alarm-id="step1-kl"]')
    expect(finding).to_have_attribute("data-state", "finding")
    expect(finding).to_contain_text(f"Setup check failed at step 1: {found['title']}")
    expect(finding).to_contain_text(found["detail"])
    expect(page.locator("#health .alarm-banner")).to_have_count(0)  # nothing firing
    shot(page, "run-health-setup-finding")
    page.goto(server.url + "/?tag=health-setup")
    expect(page.locator(f'tr[data-run-id="{run["id"]}"] [data-health-cell]')).to_have_text("healthy")
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
