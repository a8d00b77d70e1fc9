"""Asynchronous training's staleness in the browser (issue 29): a run whose steps logged verl's
training/off_policy/* metrics and whose answers (made by the engine's sample builder from a batch with
`policy_versions`, sent by its dashboard logger) crossed weight updates. The Run page draws the staleness chart (a
synchronous run's on-policy values do not), the Samples page shows each answer's versions and staleness, filters
the stale ones, and shades tokens by the version that wrote them; the Compare page draws it too when one of the runs
compared trained off-policy."""
from __future__ import annotations

import random
import re

import torch
from playwright.sync_api import expect

from engine.loggers.dashboard import DashboardLogger
from engine.models.tokenizer import build_char_tokenizer
from engine.protocol import Batch
from engine.trainer.samples import build_samples
from tests.ui.conftest import ARTIFACTS, shot
from tests.ui.seed import step_metrics

P = "training/off_policy"


def _off_policy(step: int, staleness: float, span: float, evicted: float) -> dict[str, float]:
    return {f"{P}/trajectory_staleness/mean": staleness, f"{P}/trajectory_staleness/max": staleness,
            f"{P}/trajectory_staleness_worst/mean": staleness + span - 1, f"{P}/trajectory_staleness_worst/max": staleness + span - 1,
            f"{P}/trajectory_spans/mean": span, f"{P}/trajectory_spans/max": span, f"{P}/evicted_samples": evicted}


def _plant(server, name: str, rows: list[tuple[float, float, float]], timeline: bool = False) -> dict:
    run = server.api.external_run(name, tags=["ui"])
    rng = random.Random(0)
    points = []
    for step, row in enumerate(rows, start=1):
        points += step_metrics(step, len(rows), rng)
        points += [{"key": k, "step": step, "value": v} for k, v in _off_policy(step, *row).items()]
        if timeline:  # one batch ahead: step s+1 generates (1 s) while step s trains (2 s); nothing waits
            points += [{"key": f"timeline/{k}", "step": step, "value": float(v)} for k, v in
                       {"rollout_start_s": 2 * step - 2, "rollout_end_s": 2 * step - 1, "train_start_s": 2 * step - 1,
                        "train_end_s": 2 * step + 1}.items()]
    server.api.metrics(run, points)
    return run


def _answers(step: int) -> list[dict]:
    """Step `step` trains version step - 1: one answer on it, one a version behind, one that crossed an update."""
    tok = build_char_tokenizer()
    responses = torch.tensor([tok.encode(t, add_special_tokens=False) for t in ("abc", "def", "ghi")])
    v = step - 1
    batch = Batch({"responses": responses, "response_mask": torch.ones_like(responses),
                   "token_level_scores": torch.zeros(responses.shape), "old_log_probs": -0.5 * torch.ones(responses.shape),
                   "policy_versions": torch.tensor([[v, v, v], [v - 1, v - 1, v - 1], [v - 1, v - 1, v]])},
                  {"prompt_index": [0, 1, 2], "prompt_text": ["q0", "q1", "q2"], "data_source": ["arith"] * 3})
    return build_samples(batch, tok, step, "train", ["abc", "def", "ghi"])


def test_staleness_chart_versions_filter_and_overlay(page, server, tmp_path):
    stale_run = _plant(server, "async-run", [(0, 1, 0), (1, 1, 0), (1, 2, 0), (1, 1, 2)], timeline=True)
    sync_run = _plant(server, "sync-run", [(0, 1, 0)] * 4)
    logger = DashboardLogger(server.url, stale_run["id"], stale_run["ingest_token"], str(tmp_path / "spool"), quiet=True)
    logger.log_samples(3, _answers(3))
    assert logger.flush(60)
    logger.close()

    page.goto(f"{server.url}/runs/{stale_run['id']}")
    chart = page.locator("[data-chart=staleness]")
    expect(chart).to_be_visible()
    expect(chart.locator(".chart-title").first).to_contain_text("Off-policy staleness")
    expect(chart.get_by_label(re.compile("legend"))).to_contain_text("trajectory_staleness/mean")
    expect(chart.get_by_label(re.compile("legend"))).to_contain_text("evicted_samples")
    assert int(chart.get_attribute("data-points")) > 0
    shot(page, "run-staleness-chart")
    # the timeline: a bar per step on each lane, and the overlap / wait it adds up (rollout of s+1 under training of s)
    timeline = page.locator("[data-chart=timeline]")
    expect(timeline).to_be_visible()
    assert int(timeline.get_attribute("data-points")) == 8
    expect(timeline.locator("[data-timeline-summary]")).to_have_text(
        re.compile(r"steps 1–4: generation overlapped training 3 s; the trainer waited 0 s"))
    expect(timeline.get_by_label(re.compile("legend"))).to_contain_text("rollout")
    timeline.screenshot(path=str(ARTIFACTS / "run-timeline-chart.png"))
    # a synchronous run logs the same metrics, on-policy: no chart of flat lines
    page.goto(f"{server.url}/runs/{sync_run['id']}")
    expect(page.locator("[data-chart=score]")).to_be_visible()
    expect(page.locator("[data-chart=staleness]")).to_have_count(0)
    # Compare: the async run beside the sync one gets the staleness chart, a trace per run, and a summary row
    page.goto(f"{server.url}/compare?runs={stale_run['id']},{sync_run['id']}")
    compared = page.locator("[data-chart=staleness]")
    expect(compared).to_be_visible()
    legend = compared.get_by_label(re.compile("legend"))
    expect(legend).to_contain_text("async-run")
    expect(legend).to_contain_text("sync-run")
    expect(page.locator(".summary-table")).to_contain_text("training/off_policy/trajectory_staleness/mean")
    # two runs alike on-policy: no staleness chart there either
    page.goto(f"{server.url}/compare?runs={sync_run['id']}")
    expect(page.locator("[data-chart=score]")).to_be_visible()
    expect(page.locator("[data-chart=staleness]")).to_have_count(0)

    page.goto(f"{server.url}/runs/{stale_run['id']}/samples?step=3")
    cards = page.locator(".sample-card")
    expect(cards).to_have_count(3)
    badges = [cards.nth(i).locator(".sample-head [data-version]") for i in range(3)]
    expect(badges[0]).to_have_text("v2 · on-policy")
    expect(badges[1]).to_have_text("v1 · 1 version stale")
    expect(badges[2]).to_have_text("v1–2 · on-policy; oldest token 1 behind")
    # the overlay: the crossed answer's first two tokens came from the older weights, the last from the trained ones
    page.get_by_label("tokens shaded by").select_option("version")
    expect(page).to_have_url(re.compile(r"shade=version"))
    crossed = cards.nth(2)
    crossed.get_by_role("button", name="tokens").click()
    tokens = crossed.locator(".tokens .token")
    expect(tokens).to_have_count(3)
    assert [tokens.nth(i).get_attribute("data-version") for i in range(3)] == ["1", "1", "2"]
    assert "policy version v1 (1 behind the trained weights)" in tokens.first.get_attribute("title")
    background = "e => getComputedStyle(e).backgroundColor"
    old, new = tokens.first.evaluate(background), tokens.nth(2).evaluate(background)
    assert old.endswith(", 0.75)") and new.endswith(", 0)"), (old, new)  # the oldest full, the current clear
    expect(crossed.locator(".token-legend")).to_contain_text("1 version older")
    shot(page, "samples-policy-versions")

    # stale only: the answer a version behind
    page.get_by_label("stale only").check()
    expect(page).to_have_url(re.compile(r"stale=1"))
    expect(cards).to_have_count(1)
    expect(cards.first.locator(".sample-head [data-version]")).to_have_text("v1 · 1 version stale")
    page.get_by_role("button", name="table").click()
    expect(page.locator(".st-version")).to_have_count(2)  # header and the one row
    expect(page.locator(".st-row:not(.st-head) .st-version")).to_have_text("v1 · 1")
    assert not page.errors, page.errors
