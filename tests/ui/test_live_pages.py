"""Live pages that misled (issue 35, section 3), each against a real server fed through its ingest API: the samples
page while a step's answers are still arriving and a 512-answer step paged; a queued run that says why it waits
and a health panel that has judged nothing yet; a GRPO run's flat "Update size" chart explained and loss axes
without SI prefixes; side-by-side diff colours that are not the correctness colours; the Compare table's rows; the
New-run form without critic fields for GRPO and with the micro-batch the run will use; the log panel and the samples
table's columns."""
from __future__ import annotations

import colorsys
import random
import re

from playwright.sync_api import expect

from tests.ui.conftest import shot
from tests.ui.seed import step_metrics, step_samples
from tests.ui.test_pages import seeded_run

SPLIT_SUMMARY = "[data-page-summary]"


def test_samples_page_shows_complete_steps_and_pages_a_512_answer_step(page, server):
    api = server.api
    rng = random.Random(7)
    run = api.external_run("arriving", tags=["ui"])
    api.samples(run, step_samples(1, rng, prompts=64, n=4))  # step 1: 256 answers, all in
    second = step_samples(2, rng, prompts=64, n=4)
    api.samples(run, second[:64])  # step 2: the first 64 of its 256 arrived
    page.goto(f"{server.url}/runs/{run['id']}/samples")
    # following the run: the newest complete step, and what is still arriving beside it
    expect(page.locator(".step-slider strong")).to_have_text("Step 1")
    expect(page.locator(".step-slider")).to_contain_text("256 answers · mean score")
    expect(page.locator("[data-live=following]")).to_contain_text("step 2 arriving: 64 of 256 answers so far")
    # the first list page holds 40 cards, not 200, and a pager reaches every page
    expect(page.locator(".sample-card")).to_have_count(40)
    expect(page.locator(SPLIT_SUMMARY)).to_contain_text("answers 1–40 of 256 (page 1 of 7)")
    # the rest of step 2 arrives: the page moves on to it by itself
    api.samples(run, second[64:])
    expect(page.locator(".step-slider strong")).to_have_text("Step 2")
    expect(page.locator(".step-slider")).to_contain_text("256 answers · mean score")
    expect(page.locator(".sample-card").first).to_contain_text("step 2")
    expect(page.locator("[data-stale-step]")).to_have_count(0)

    # a step picked while it arrives says so, and fills in as its answers come
    third = step_samples(3, rng, prompts=128, n=4)  # 512 answers
    api.samples(run, third[:100])
    page.goto(f"{server.url}/runs/{run['id']}/samples?step=3")
    expect(page.locator(".step-slider")).to_contain_text("100 of 256 answers so far · mean score so far")
    expect(page.locator("[data-arriving]")).to_be_visible()
    api.samples(run, third[100:])  # the rest: as many as the step before it had, and more: complete
    expect(page.locator(".step-slider")).to_contain_text("512 answers · mean score")
    expect(page.locator("[data-arriving]")).to_have_count(0)
    expect(page.locator(".sample-card")).to_have_count(40)
    # every answer of the step can be reached: the last page holds answers 481-512
    page.get_by_label("last page").click()
    expect(page).to_have_url(re.compile(r"page=12"))
    expect(page.locator(SPLIT_SUMMARY)).to_contain_text("answers 481–512 of 512 (page 13 of 13)")
    expect(page.locator(".sample-card")).to_have_count(32)
    last = page.locator(".sample-card").last.get_attribute("data-sample-id")
    assert api.get(f"/api/v1/runs/{run['id']}/samples/{last}")["sample_index"] == 511
    page.get_by_label("page", exact=True).select_option(label="page 2 of 13")
    expect(page.locator(SPLIT_SUMMARY)).to_contain_text("answers 41–80 of 512")
    shot(page, "samples-paged")
    assert not page.errors


def test_queued_run_says_why_and_health_is_not_judged_yet(page, server):
    api = server.api
    made = [api.call("POST", "/api/v1/runs", {"name": f"waits-{i}", "preset": "demo", "launch": True, "tags": ["ui"]})
            for i in range(2)]
    try:
        # (runs other tests launched on this shared server wait ahead of these two)
        queue = api.get(f"/api/v1/runs/{made[1]['id']}/queue")
        assert queue["position"] >= 2 and made[0]["id"] in [r["id"] for r in queue["ahead"]], queue
        page.goto(f"{server.url}/runs/{made[1]['id']}")
        note = page.locator("[data-queue-position]")
        expect(note).to_have_attribute("data-queue-position", str(queue["position"]))
        expect(note).to_contain_text(queue["reason"])  # "3rd in the queue, after run 5 (…), run 6 (waits-0). This server …"
        assert re.match(rf"{queue['position']}(st|nd|rd|th) in the queue, after run ", queue["reason"]), queue["reason"]
        expect(note).to_contain_text("RLSTUDIO_DISPATCH=false")  # this test server launches nothing, and says so
        expect(page.locator("#health [data-judged=no]")).to_have_text(re.compile("not judged yet"))
        expect(page.get_by_text("No health alarm")).to_have_count(0)
        shot(page, "run-queued")
    finally:
        for run in made:
            api.call("POST", f"/api/v1/runs/{run['id']}/cancel")
    # a run with a judged step (and nothing wrong) says so
    judged = api.external_run("judged", tags=["ui"])
    api.metrics(judged, [{"key": "critic/score/mean", "step": s, "value": 0.2 + 0.1 * s} for s in (1, 2, 3)])
    page.goto(f"{server.url}/runs/{judged['id']}")
    expect(page.locator("#health [data-judged=yes]")).to_contain_text("judged up to step 3")
    expect(page.locator("[data-queue-position]")).to_have_count(0)
    assert not page.errors


def tick_labels(page, chart: str) -> list[str]:
    return page.locator(f'[data-chart="{chart}"] .main-svg .ytick text').evaluate_all("ts => ts.map(t => t.textContent)")


def test_grpo_update_size_note_and_no_si_prefix_below_one(page, server):
    api = server.api
    rng = random.Random(11)
    run = api.external_run("grpo-flat", preset="demo", tags=["ui"])
    points = []
    for s in range(1, 9):
        points += [p for p in step_metrics(s, 8, rng) if p["key"] != "actor/pg_loss"]
        points += [{"key": "actor/ppo_kl", "step": s, "value": 0.0}, {"key": "actor/pg_clipfrac", "step": s, "value": 0.0},
                   {"key": "actor/pg_loss", "step": s, "value": 0.004 * (-1) ** s + 0.001 * s}]
    api.metrics(run, points)
    page.goto(f"{server.url}/runs/{run['id']}")
    update = page.locator('[data-chart="update"]')
    expect(update.locator("[data-chart-note]")).to_contain_text("Flat at 0, as expected here")
    expect(page.locator('[data-chart="actor-loss"] [data-chart-note]')).to_have_count(0)  # only where all is 0
    expect(page.locator('[data-chart="actor-loss"] .plot[data-ready="true"]')).to_be_visible()
    labels = tick_labels(page, "actor-loss")
    assert labels and all(re.fullmatch(r"[−-]?\d+(\.\d+)?(e[−-]?\d+)?", t) for t in labels), labels  # 0.005, not 5m
    assert any("." in t for t in labels), labels
    # large numbers keep their prefix (throughput ~500 has none; no axis reads "m" or "µ")
    for chart in ("critic-loss", "kl", "entropy", "update"):
        assert not [t for t in tick_labels(page, chart) if re.search(r"[mµnp]$", t)], (chart, tick_labels(page, chart))
    shot(page, "grpo-update-note")
    assert not page.errors


def _hue(css: str) -> tuple[float, float]:
    r, g, b = (int(x) / 255 for x in re.findall(r"\d+", css)[:3])
    h, _l, s = colorsys.rgb_to_hls(r, g, b)
    return h * 360, s


def test_side_by_side_diff_colours_are_not_correctness_colours(page, server):
    run = seeded_run(server.api, "sbs-colours", samples_at=(2, 4))
    page.goto(f"{server.url}/side-by-side?a={run['id']}:2&b={run['id']}:4&split=train")
    expect(page.locator("[data-row]").first).to_be_visible()
    added = page.locator("[data-row] .diff-added").first
    expect(added).to_be_visible()
    bg = "e => getComputedStyle(e).backgroundColor"
    good = page.locator(".score-good").first.evaluate(bg)
    bad = page.locator(".score-bad").first.evaluate(bg)
    for diff in (added.evaluate(bg), page.locator("[data-row] .diff-removed").first.evaluate(bg)):
        assert diff not in (good, bad)
        hue, saturation = _hue(diff)
        assert saturation > 0.2 and not (75 <= hue <= 165) and not (hue <= 25 or hue >= 335), (diff, hue)  # not green, not red
    expect(page.locator("[data-diff-legend]")).to_contain_text("only in the right answer")
    assert not page.errors


def test_compare_summary_rows_best_and_legends(page, server):
    a = seeded_run(server.api, "order-a", seed=21)
    b = seeded_run(server.api, "order-b", seed=22, lr="3e-4")
    for run, v in ((a, 0.4), (b, 0.5)):
        server.api.metrics(run, [{"key": "val-core/arith/reward/mean@1", "step": s, "value": v + 0.01 * s} for s in (4, 8)])
    page.goto(f"{server.url}/compare?runs={a['id']},{b['id']}")
    rows = page.locator(".summary-table tbody tr")
    expect(rows.first).to_have_attribute("data-key", "val-core/arith/reward/mean@1")
    keys = rows.evaluate_all("rs => rs.map(r => r.dataset.key)")
    assert keys[:3] == ["val-core/arith/reward/mean@1", "critic/score/mean", "critic/rewards/mean"], keys
    assert keys.index("actor/reward_kl_penalty") < keys.index("actor/entropy") < keys.index("response_length/mean") \
        < keys.index("actor/pg_loss"), keys
    assert not [k for k in keys if "off_policy" in k]  # synchronous runs: no staleness row
    # a best value where one direction is better; elsewhere "n/a" that says why
    kl = page.locator('.summary-table tr[data-key="actor/reward_kl_penalty"] [data-no-best]').first
    expect(kl).to_have_text("n/a")
    assert "healthy KL" in kl.get_attribute("title")
    held = page.locator('.summary-table tr[data-key="val-core/arith/reward/mean@1"] td.num')
    expect(held.nth(1)).to_have_text("0.48")  # run a's best held-out score
    expect(page.locator('.summary-table tr[data-key="val-core/arith/reward/mean@1"]')).to_contain_text("higher is better")
    # the response-length legend: one entry per run and one per line, not one per pair
    legend = page.locator('[data-chart="response-length"] [data-legend]')
    expect(legend).to_have_count(5)
    assert legend.evaluate_all("ls => ls.map(l => l.dataset.legend)") == ["order-a", "order-b", "mean", "max", "clip_ratio"]
    # a run's entry hides all of its lines
    page.locator('[data-chart="response-length"] [data-legend="order-a"] button').click()
    hidden = page.locator('[data-chart="response-length"] .plot').evaluate(
        "gd => gd.data.filter(t => t.visible === 'legendonly').map(t => t.name)")
    assert sorted(hidden) == ["order-a · clip_ratio", "order-a · max", "order-a · mean"], hidden
    shot(page, "compare-summary")
    assert not page.errors


def test_new_run_form_hides_critic_for_grpo_and_shows_the_planned_micro_batch(page, server):
    page.goto(server.url + "/runs/new")
    expect(page.locator('[data-preset="demo_ppo"]')).to_have_attribute("aria-pressed", "true")
    expect(page.locator('[data-key="critic.optim.lr"]')).to_be_visible()  # PPO: a critic
    expect(page.locator("[data-no-critic]")).to_have_count(0)
    # the preset asks for micro-batch 256; the run uses 64 (the mini-batch each worker trains on)
    micro = page.locator('[data-field="actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]')
    expect(micro.locator("[data-planned]")).to_contain_text("the run uses 64: 256 is capped")
    page.locator('[data-key="actor_rollout_ref.actor.ppo_mini_batch_size"]').fill("32")
    expect(micro.locator("[data-planned]")).to_contain_text("the run uses 32")
    page.locator('[data-key="actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]').fill("")
    expect(micro.locator("[data-planned]")).to_contain_text(re.compile(r"auto: the run uses \d+"))
    # GRPO: no critic, so no critic fields and no critic LoRA block
    page.locator('[data-preset="demo"]').click()
    expect(page.locator('[data-preset="demo"]')).to_have_attribute("aria-pressed", "true")
    expect(page.locator("[data-no-critic]")).to_contain_text("No critic: grpo")
    expect(page.locator('[data-key^="critic."]:not([data-key="critic.enable"])')).to_have_count(0)
    lora = page.locator('[data-group="LoRA"]')
    if lora.count():
        expect(lora.locator('[data-key^="critic."]')).to_have_count(0)
    shot(page, "new-run-grpo")
    assert not page.errors


def test_log_lines_do_not_wrap_mid_record_and_table_columns_are_explained(page, server):
    run = seeded_run(server.api, "long-log", finish=False)
    long = "Epoch 1 | Step 9 | " + " | ".join(f"metric_{i}: {i / 7:.4f}" for i in range(40))
    server.api.logs(run, [long, "short line"], start=100)
    page.goto(f"{server.url}/runs/{run['id']}")
    line = page.locator(".log-tail .log-line").filter(has_text="metric_39")
    expect(line).to_be_visible()
    one = page.locator(".log-tail .log-line").filter(has_text="short line").evaluate("e => e.getBoundingClientRect().height")
    assert line.evaluate("e => e.getBoundingClientRect().height") == one  # one record, one row: it scrolls sideways
    assert page.locator(".log-tail").evaluate("e => e.scrollWidth > e.clientWidth")
    page.get_by_label("wrap long lines").check()
    expect(page.locator(".log-tail.wrap")).to_be_visible()
    height = line.evaluate("e => e.getBoundingClientRect().height")
    assert height > 2 * one
    assert line.evaluate("e => getComputedStyle(e).textIndent").startswith("-")  # continuation lines hang under it
    server.api.status(run, "succeeded")
    page.goto(f"{server.url}/runs/{run['id']}/samples?step=4&view=table")
    expect(page.locator('[role="columnheader"].st-answer')).to_have_text("answer")
    expect(page.locator("[data-table-legend]")).to_contain_text("its position among the step's answers")
    assert not page.errors
