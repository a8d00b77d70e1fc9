"""Inspection views against a real server fed through its ingest API, checked by what the user sees: the
dense table (sort, filter, 4,096 answers virtualised), the Samples page following a live run (and pausing),
the GRPO group numbers against the engine's own advantage function, side by side that re-pairs steps sharing
no prompt, the KL chart, the skipped-update alarm, charts that stay readable (panels, flags, overlaps, the
step-time breakdown), and "What changed" between validations."""
from __future__ import annotations

import random
import re
import time

import pytest
import torch
from playwright.sync_api import expect

from engine.algos.advantages import compute_grpo_outcome_advantage
from tests.ui.conftest import ARTIFACTS, shot
from tests.ui.seed import step_metrics


def answers(step, prompts, scores, *, split="train", tokens=4, grpo=True):
    """Samples for `prompts` (prompt ids), each with the scores in scores[prompt] (one answer per score); the
    advantages are what the engine's GRPO computes for them."""
    out = []
    flat = [(p, s) for p in prompts for s in scores[p]]
    adv = [0.0] * len(flat)
    if grpo:
        t = torch.tensor([s for _, s in flat], dtype=torch.float32)
        a, _ = compute_grpo_outcome_advantage(token_level_rewards=t[:, None], response_mask=torch.ones(len(flat), 1),
                                              index=[str(p) for p, _ in flat])
        adv = a[:, 0].tolist()
    for index, ((p, s), av) in enumerate(zip(flat, adv)):
        response = f"answer {p}.{index} = {'right' if s > 0 else 'wrong'}\nsecond line"
        out.append({"step": step, "split": split, "sample_index": index, "prompt_index": p, "group_uid": f"{split}{step}-{p}",
                    "prompt": f"What is prompt {p}?", "response": response, "score": s, "data_source": "arith",
                    "tokens": [f"t{k}" for k in range(tokens)], "old_log_probs": [-0.1] * tokens,
                    "advantages": [av] * tokens})
    return out


def test_dense_table_sorts_filters_and_stays_virtual_at_4096(page, server):
    run = server.api.external_run("table-run", tags=["ui"])
    rng = random.Random(7)
    scores = {p: [float(rng.random() < 0.4) for _ in range(8)] for p in range(512)}  # 512 prompts x 8 = 4,096
    server.api.samples(run, answers(5, range(512), scores, tokens=3))
    server.api.status(run, "succeeded")
    page.goto(f"{server.url}/runs/{run['id']}/samples?view=table")
    count = page.locator("[data-table-count]")
    expect(count).to_have_attribute("data-table-count", "4096")
    rows = page.locator(".st-body [role=row]")
    expect(rows.first).to_be_visible()
    assert rows.count() < 100  # only the rows in view are in the DOM
    expect(rows.first.locator(".st-prompt")).to_have_text("#0")
    expect(rows.first.locator(".st-question")).to_have_text("What is prompt 0?")
    # sort by score, highest first: every visible row scores 1
    page.get_by_role("button", name="score").click()
    expect(page).to_have_url(re.compile(r"sort=-score"))
    expect(page.locator('[role=columnheader][aria-sort="descending"]')).to_have_text(re.compile("score"))
    assert set(rows.locator(".st-score").all_inner_texts()) == {"1"}
    # scroll to the bottom: the last rows score 0 (still sorted) and are rendered
    page.locator(".st-body").evaluate("el => { el.scrollTop = el.scrollHeight; el.dispatchEvent(new Event('scroll')); }")
    expect(rows.last.locator(".st-score")).to_have_text("0")
    assert rows.count() < 100
    # filter to one prompt: its 8 answers, with the advantages the engine computed for them
    page.get_by_label("filter table").fill("#17")
    expect(count).to_have_attribute("data-table-count", "8")
    expected = sorted(scores[17], reverse=True)
    assert [float(t) for t in rows.locator(".st-score").all_inner_texts()] == expected
    shot(page, "samples-table")
    # a row opens that prompt's group
    rows.first.click()
    expect(page).to_have_url(re.compile(r"view=groups.*prompt=17|prompt=17.*view=groups"))
    expect(page.locator("[data-group]")).to_have_count(1)
    expect(page.locator("[data-group] [data-answer]")).to_have_count(8)
    assert not page.errors


def test_group_view_shows_the_numbers_grpo_used(page, server):
    run = server.api.external_run("group-run", tags=["ui"])
    scores = {0: [1.0, 0.0, 0.0, 0.0], 1: [1.0, 1.0, 1.0, 1.0], 2: [0.0, 1.0, 1.0, 0.5], 3: [1.0]}
    samples = answers(3, [0, 1, 2, 3], scores)
    for s in samples:  # prompt 0 as a chat template renders it
        if s["prompt_index"] == 0:
            s["prompt"] = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is prompt 0?<|im_end|>\n<|im_start|>assistant\n"
    server.api.samples(run, samples)
    server.api.status(run, "succeeded")
    page.goto(f"{server.url}/runs/{run['id']}/samples?view=groups")
    groups = page.locator("[data-group]")
    expect(groups).to_have_count(4)
    first = groups.nth(0)
    # the question, not the template; the raw prompt one click away
    question = first.locator("[data-question]")
    expect(question.locator(".model-text")).to_have_text("What is prompt 0?")
    question.get_by_role("button", name="raw prompt").click()
    expect(question.locator(".model-text")).to_contain_text("<|im_start|>user")
    # std with n - 1: sqrt(0.75 / 3) = 0.5 (dividing by n would give 0.433)
    expect(first.locator("[data-group-summary]")).to_contain_text("mean 0.25 · std 0.5 (n − 1)")
    worked = [float(t) for t in first.locator("[data-grpo-advantage]").all_inner_texts()]
    logged = [float(t) for t in first.locator("[data-logged-advantage]").all_inner_texts()]
    assert worked == logged == [1.5, -0.5, -0.5, -0.5]  # the page's arithmetic = the engine's advantages
    third = groups.nth(2)
    third_worked = [float(t) for t in third.locator("[data-grpo-advantage]").all_inner_texts()]
    third_logged = [float(t) for t in third.locator("[data-logged-advantage]").all_inner_texts()]
    assert third_worked == third_logged and third_worked[0] < 0 < third_worked[1]
    expect(groups.nth(1)).to_contain_text("degenerate group")
    expect(groups.nth(1).locator("[data-group-summary]")).to_contain_text("std 0")
    assert [float(t) for t in groups.nth(1).locator("[data-grpo-advantage]").all_inner_texts()] == [0, 0, 0, 0]
    # one answer: its real mean and no group statistic (GRPO's advantage is the score itself)
    single = groups.nth(3)
    expect(single.locator("[data-group-summary]")).to_have_text("1 answer · mean 1 · no group statistic (one answer per prompt)")
    assert [float(t) for t in single.locator("[data-grpo-advantage]").all_inner_texts()] == [1.0]
    shot(page, "samples-group-numbers")
    # a score filter leaves part of a group out: the numbers GRPO used are read back from the logged advantages
    page.goto(f"{server.url}/runs/{run['id']}/samples?view=groups&min=0.5")
    third = page.locator("[data-group$='-2']")
    expect(third.locator("[data-answer]")).to_have_count(3)
    expect(third.locator("[data-partial]")).to_be_visible()
    assert float(third.locator("[data-used-mean]").get_attribute("data-used-mean")) == pytest.approx(0.625, abs=1e-4)
    assert float(third.locator("[data-used-std]").get_attribute("data-used-std")) == pytest.approx((0.6875 / 3) ** 0.5, abs=1e-4)
    assert not page.errors


def test_samples_page_follows_a_live_run_and_pauses(page, server):
    run = server.api.external_run("live-samples", tags=["ui"])  # running: it may still log samples
    scores = {p: [1.0, 0.0] for p in range(3)}
    server.api.samples(run, answers(2, range(3), scores))
    page.goto(f"{server.url}/runs/{run['id']}/samples")
    expect(page.locator("label[for=step-slider]")).to_have_text("Step 2")
    expect(page.locator("[data-live]")).to_have_attribute("data-live", "following")
    expect(page.locator("[data-live]")).to_contain_text("● live")
    server.api.samples(run, answers(4, range(3), scores))
    expect(page.locator("label[for=step-slider]")).to_have_text("Step 4")  # no reload
    expect(page.locator(".sample-card")).to_have_count(6)
    page.get_by_role("button", name="Pause").click()
    expect(page).to_have_url(re.compile(r"live=0"))
    server.api.samples(run, answers(6, range(3), scores))
    time.sleep(1.5)  # the paused page must not move on its own
    expect(page.locator("label[for=step-slider]")).to_have_text("Step 4")
    page.get_by_role("button", name="Follow the newest step").click()
    expect(page.locator("label[for=step-slider]")).to_have_text("Step 6")
    server.api.status(run, "succeeded")
    expect(page.locator("[data-live]")).to_have_count(0)  # finished: nothing left to follow
    assert not page.errors


def test_side_by_side_never_dead_ends(page, server):
    run = server.api.external_run("shuffled", tags=["ui"])
    scores = {p: [1.0, 0.0] for p in range(12)}
    # training draws new prompts every step; step 4 comes back to step 1's prompts; validations ask 0..3
    draws = {1: range(4), 2: range(4, 8), 3: range(8, 12), 4: range(4)}
    samples = [s for step, ps in draws.items() for s in answers(step, ps, scores)]
    samples += answers(0, range(4), scores, split="val") + answers(4, range(4), {p: [1.0] for p in range(4)}, split="val")
    server.api.samples(run, samples)
    server.api.status(run, "succeeded")
    # from the Samples page at step 4: the partner is step 1, the nearest step that shares prompts
    page.goto(f"{server.url}/runs/{run['id']}/samples?step=4")
    link = page.get_by_role("link", name=re.compile("Side by side with step 1"))
    expect(link).to_contain_text("4 shared prompts")
    link.click()
    expect(page.get_by_text("Prompt #0")).to_be_visible()
    expect(page.locator("[data-row]")).to_have_count(2)
    # step 2's prompts were never asked again: two validations instead
    page.goto(f"{server.url}/runs/{run['id']}/samples?step=2")
    page.get_by_role("link", name="Side by side: validations 0 and 4").click()
    expect(page).to_have_url(re.compile(r"split=val"))
    expect(page.get_by_text("Prompt #0")).to_be_visible()
    # picked by hand, two neighbouring training steps are re-paired, and the page says how
    page.goto(f"{server.url}/side-by-side?a={run['id']}:1&b={run['id']}:2")
    notice = page.locator("[data-paired]")
    expect(notice).to_have_attribute("data-paired", "validation")
    expect(notice).to_contain_text("Training steps 1 and 2 share no prompt")
    expect(notice).to_contain_text("showing validations 0 and 4")
    expect(page.locator("[data-row]").first).to_be_visible()
    page.goto(f"{server.url}/side-by-side?a={run['id']}:3&b={run['id']}:4")
    expect(page.locator("[data-paired]")).to_have_attribute("data-paired", "nearest-train")
    expect(page.locator("[data-paired]")).to_contain_text("showing step 1")
    expect(page).to_have_url(re.compile(rf"a={run['id']}(:|%3A)1&b={run['id']}(:|%3A)4"))
    shot(page, "side-by-side-repaired")
    assert not page.errors


def test_kl_chart_is_to_the_reference_and_skipped_updates_alarm(page, server):
    rng = random.Random(3)
    no_kl = server.api.external_run("no-kl", tags=["ui"])
    points = []
    for s in range(1, 7):
        points += [p for p in step_metrics(s, 10, rng) if p["key"] != "actor/reward_kl_penalty"]
        points.append({"key": "actor/grad_norm_nonfinite", "step": s, "value": 1.0 if s == 3 else 0.0})
    server.api.metrics(no_kl, points)
    server.api.status(no_kl, "succeeded")
    page.goto(f"{server.url}/runs/{no_kl['id']}")
    kl = page.locator('[data-chart="kl"]')
    expect(kl).to_contain_text("This run has no KL to the reference")
    expect(kl).to_have_attribute("data-points", "0")
    expect(page.locator('[data-chart="update"]')).to_be_visible()  # ppo_kl has its own chart
    # the skipped update is the server's alarm (GET /runs/{id}/health), shown as the server words it
    alarm = page.locator('.alarm[data-alarm-id="skipped:actor"]')
    expect(alarm).to_have_attribute("data-since-step", "3")
    skipped = next(a for a in server.api.get(f"/api/v1/runs/{no_kl['id']}/health")["alarms"] if a["id"] == "skipped:actor")
    assert skipped["state"] == "firing" and skipped["severity"] == "error", skipped
    expect(alarm).to_contain_text("Actor update skipped at 1 step")
    expect(alarm).to_contain_text(skipped["detail"])
    expect(alarm).to_contain_text("actor/grad_norm_nonfinite = 1 at step")
    expect(alarm.get_by_role("link")).to_have_attribute("href", f"/runs/{no_kl['id']}/samples?step=3")
    shot(page, "run-no-kl-skipped")
    with_kl = server.api.external_run("with-kl", tags=["ui"])
    server.api.metrics(with_kl, [p for s in range(1, 7) for p in step_metrics(s, 10, rng)])
    server.api.status(with_kl, "succeeded")
    page.goto(f"{server.url}/runs/{with_kl['id']}")
    expect(page.locator('[data-chart="kl"]')).to_have_attribute("data-points", "6")
    expect(page.locator('[data-chart="kl"] .chart-legend')).to_have_text("reward_kl_penalty")
    assert not page.errors


def test_run_charts_stay_readable(page, server):
    """Issue 24 item 8: no secondary y axis (a clip ratio of 1/256 gets a panel of its own, in percent), the 0/1
    skipped flag is a marker on the step axis, equal learning rates stay two visible lines, tiny values get SI
    ticks, and the step time is stacked bars that can show each phase's share of the step."""
    rng = random.Random(5)
    run = server.api.external_run("readable-charts", tags=["ui"])
    points = []
    for s in range(1, 31):
        points += [p for p in step_metrics(s, 30, rng) if p["key"] not in ("actor/ppo_kl", "response_length/clip_ratio")]
        points += [{"key": "actor/ppo_kl", "step": s, "value": rng.uniform(1e-4, 4e-4)},
                   {"key": "actor/pg_clipfrac", "step": s, "value": rng.uniform(5e-4, 1.6e-3)},
                   {"key": "response_length/clip_ratio", "step": s, "value": 1 / 256 if s % 7 == 0 else 0.0},
                   {"key": "actor/grad_norm_nonfinite", "step": s, "value": 1.0 if s == 12 else 0.0},
                   {"key": "critic/lr", "step": s, "value": 1e-6},  # = actor/lr
                   {"key": "timing_s/gen_worker", "step": s, "value": 0.9}]  # inside gen: not stacked
    server.api.metrics(run, points)
    server.api.status(run, "succeeded")
    page.goto(f"{server.url}/runs/{run['id']}")
    page.wait_for_function("""() => { const plots = [...document.querySelectorAll('[data-chart] .plot')];
        return plots.length >= 10 && plots.every((d) => d.dataset.ready); }""")
    charts = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('[data-chart]')].filter((c) => c.querySelector('.plot'))
        .map((c) => { const gd = c.querySelector('.plot');
          return [c.dataset.chart, {layout: JSON.parse(JSON.stringify(gd.layout)),
            data: gd.data.map((t) => ({name: t.name, type: t.type, mode: t.mode, yaxis: t.yaxis, x: Array.from(t.x), line: t.line})),
            ticks: [...c.querySelectorAll('.ytick text')].map((t) => t.textContent)}]; }))""")
    for chart_id, chart in charts.items():
        axes = {k: v for k, v in chart["layout"].items() if k.startswith("yaxis")}
        for name, axis in axes.items():  # no right-hand axis; the only overlay is the flags' invisible one
            assert axis.get("side") != "right", (chart_id, name)
            assert not axis.get("overlaying") or axis.get("visible") is False, (chart_id, name)
        for tick in chart["ticks"]:  # 1.28e+4 reads 12.8k; below 1 no SI prefix ("5m" reads as minutes, issue 35)
            assert not re.search(r"0\.000|e\+\d|\d[mµμnp]$", tick), (chart_id, tick)
    assert any(re.fullmatch(r"\d(\.\d+)?e−4", t) for t in charts["update"]["ticks"]), charts["update"]["ticks"]  # ppo_kl ~2e-4
    length = charts["response-length"]
    clip = next(t for t in length["data"] if t["name"] == "clip_ratio")
    assert clip["yaxis"] == "y2"
    assert length["layout"]["yaxis2"]["domain"][1] < length["layout"]["yaxis"]["domain"][0]  # a panel below
    assert length["layout"]["yaxis2"]["tickformat"] == "~%"
    grad = charts["grad-norm"]
    flag = next(t for t in grad["data"] if t["name"] == "actor update skipped")
    assert flag["mode"] == "markers" and flag["x"] == [12]
    assert [s["x0"] for s in grad["layout"]["shapes"] if s["type"] == "line"] == [12]
    expect(page.locator('[data-chart="grad-norm"] [data-legend="actor update skipped"]')).to_contain_text("1 step")
    lr = charts["lr"]
    assert next(t for t in lr["data"] if t["name"] == "critic/lr")["line"]["dash"] == "dash"
    expect(page.locator('[data-chart="lr"] [data-legend="critic/lr"]')).to_contain_text("= actor/lr")
    timing = charts["timing"]
    assert {t["type"] for t in timing["data"]} == {"bar"} and timing["layout"]["barmode"] == "stack"
    assert "gen_worker" not in {t["name"] for t in timing["data"]}
    assert timing["data"][0]["name"] == "gen"  # the pipeline's order, generation at the bottom
    expect(page.locator('[data-chart="timing"] .chart-legend')).to_contain_text("update_actor")
    shot(page, "run-charts-readable")
    page.locator('[data-chart="timing"]').get_by_role("button", name="share of step").click()
    page.wait_for_function("() => document.querySelector('[data-chart=\"timing\"] .plot').layout.barnorm === 'percent'")
    expect(page.locator('[data-chart="timing"] .ytick').last).to_contain_text("%")
    page.locator('[data-chart="timing"]').screenshot(path=str(ARTIFACTS / "run-step-time-share.png"))
    assert not page.errors


def test_what_changed_between_validations(page, server):
    run = server.api.external_run("changes-run", tags=["ui"])
    # prompts 0..4 at validations 0, 10, 20 (1 = solved)
    table = {0: [0, 1, 1], 1: [1, 0, 1], 2: [1, 1, 1], 3: [0, 0, 0], 4: [0, 0, 1]}
    samples = []
    for i, step in enumerate((0, 10, 20)):
        samples += answers(step, range(5), {p: [float(v[i])] for p, v in table.items()}, split="val", grpo=False)
    server.api.samples(run, samples)
    server.api.status(run, "succeeded")
    page.goto(f"{server.url}/runs/{run['id']}/samples?split=val")
    page.get_by_role("link", name="What changed").click()
    expect(page).to_have_url(re.compile(rf"/runs/{run['id']}/changes"))
    # default: the first validation against the last (0 -> 20): 0 and 4 newly solved, 1 and 2 both, 3 neither
    counts = {k: page.locator(f'[data-kind="{k}"] [data-count]') for k in ("newly-solved", "newly-failed", "both", "neither")}
    expect(counts["newly-solved"]).to_have_text("2")
    expect(counts["newly-failed"]).to_have_text("0")
    expect(counts["both"]).to_have_text("2")
    expect(counts["neither"]).to_have_text("1")
    expect(page.locator(".change-list tbody tr")).to_have_count(2)
    assert page.locator(".change-list tbody tr").evaluate_all("rs => rs.map(r => r.dataset.prompt)") == ["0", "4"]
    # 10 -> 20: prompt 1 came back, 4 newly solved; step 0 -> 10 lost prompt 1
    page.get_by_label("step A").select_option("10")
    expect(counts["newly-solved"]).to_have_text("2")
    page.get_by_label("step A").select_option("0")
    page.get_by_label("step B").select_option("10")
    expect(counts["newly-failed"]).to_have_text("1")
    page.locator('[data-kind="newly-failed"]').click()
    row = page.locator(".change-list tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_have_attribute("data-prompt", "1")
    expect(row.locator("[data-delta]")).to_have_text("-1")
    # the strip: prompt 1 flipped twice (solved, failed, solved) and comes first
    strip = page.locator("[data-strip]").first
    expect(strip).to_have_attribute("data-strip", "1")
    expect(strip.locator("[data-marks]")).to_have_attribute("data-marks", "101")
    shot(page, "what-changed")
    # each row opens side by side at that prompt
    row.get_by_role("link", name="side by side →").click()
    expect(page).to_have_url(re.compile(r"/side-by-side\?.*prompt=1"))
    expect(page.get_by_text("Prompt #1")).to_be_visible()
    expect(page.locator("[data-row]")).to_have_count(1)
    assert not page.errors


def test_rollout_actor_mismatch_is_findable(page, server):
    run = server.api.external_run("vllm-like", tags=["ui"])
    samples = answers(2, range(3), {p: [1.0, 0.0] for p in range(3)}, tokens=4)
    for i, s in enumerate(samples):  # the actor recomputes -0.1 per token; the rollout agrees except on answer 4
        s["extras"] = {"rollout_log_probs": [-0.1, -0.1, -0.1, -0.1]}
    samples[4]["extras"] = {"rollout_log_probs": [-0.1, -0.8, -0.15, -0.1]}
    server.api.samples(run, samples)
    server.api.status(run, "succeeded")
    # the table finds it: sort by the gap, the outlier comes first
    page.goto(f"{server.url}/runs/{run['id']}/samples?view=table")
    page.get_by_role("button", name="max |Δ rollout|").click()  # largest first
    expect(page.locator('[role=columnheader][aria-sort="descending"]')).to_contain_text("max |Δ rollout|")
    first = page.locator(".st-body [role=row]").first
    expect(first.locator(".st-mismatch")).to_have_text("0.7")
    expect(first.locator(".st-answer")).to_have_text("4")
    # the card says how far apart they are and on how many tokens; the tokens show the gap and the weight
    page.goto(f"{server.url}/runs/{run['id']}/samples?step=2&shade=rollout-gap")
    card = page.locator(".sample-card").nth(4)
    expect(card.locator("[data-mismatch]")).to_have_text("max |Δ rollout| 0.7 · 1 token > 0.1")
    expect(page.locator(".sample-card").first.locator("[data-mismatch]")).to_have_text("max |Δ rollout| 0 · 0 tokens > 0.1")
    card.get_by_role("button", name="tokens").click()
    gaps = [float(v) for v in card.locator(".token").evaluate_all("ts => ts.map(t => t.dataset.value)")]
    assert gaps == pytest.approx([0, -0.7, -0.05, 0])
    assert "weight 2.014" in card.locator(".token").nth(1).get_attribute("title")  # exp(0.7)
    shot(page, "samples-rollout-gap")
    assert not page.errors
