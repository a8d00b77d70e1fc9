"""The UI against a real server fed through its ingest API: runs table live status, charts that grow while
points stream in, samples of a step (list, groups, tokens), side by side with word diff and keyboard stepping,
compare with the config diff, the New-run form (preset, pasted command, inline 422), and the XSS guarantee."""
from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.ui.conftest import shot
from tests.ui.seed import step_metrics, step_samples
from tests.waiting import wait_for

XSS = '<img src=x onerror=alert(1)> and <script>alert(1)</script>'


def seeded_run(api, name, *, steps=8, lr="1e-4", kl=0.03, samples_at=(2, 4, 6, 8), seed=0, finish=True):
    rng = random.Random(seed)
    run = api.external_run(name, overrides=[f"actor_rollout_ref.actor.optim.lr={lr}"], tags=["ui"])
    t0 = time.time() - 600
    points = []
    for s in range(1, steps + 1):
        points += step_metrics(s, 20, rng, kl_scale=kl, wall=t0 + 3 * s)
    api.metrics(run, points)
    samples = []
    for s in samples_at:
        samples += step_samples(s, rng, good=0.2 + 0.1 * s)
    api.samples(run, samples)
    api.logs(run, [f"Epoch 1 | Step {s} | Actor Loss: 0.01 | KL: 0.02 | Reward: 0.5" for s in range(1, steps + 1)])
    if finish:
        api.status(run, "succeeded")
    return run


def chart_points(page, chart: str) -> int:
    return int(page.locator(f'[data-chart="{chart}"]').get_attribute("data-points") or 0)


def test_runs_table_updates_live(page, server):
    run = server.api.external_run("live-status", tags=["ui", "live-table"])
    # a newer run of the same tag, held-out score lower: first by date, second by held-out score
    lower = server.api.external_run("live-status-lower", tags=["live-table"])
    server.api.metrics(lower, [{"key": "val-core/arith/reward/mean@1", "step": 1, "value": 0.125}])
    page.goto(server.url + "/?tag=live-table")  # the server is shared: other tests' runs are filtered out
    expect(page.locator("tbody tr").first).to_have_attribute("data-run-id", str(lower["id"]))
    row = page.locator(f'tr[data-run-id="{run["id"]}"]')
    expect(row.locator("[data-status]")).to_have_text("running")
    server.api.metrics(run, step_metrics(3, 10, random.Random(1)))
    server.api.status(run, "succeeded")
    expect(row.locator("[data-status]")).to_have_text("succeeded")  # via SSE, no reload
    expect(row).to_contain_text("3 / 10")
    # a validation's score reaches the Held-out column live, beside the training score
    server.api.metrics(run, [{"key": "val-core/arith/reward/mean@1", "step": 3, "value": 0.565}])
    expect(row.locator("[data-val-score]")).to_have_text("0.565")
    expect(row.locator("[data-val-score]")).to_have_attribute("title", "val-core/arith/reward/mean@1 at step 3")
    page.get_by_role("button", name="Held-out").click()
    expect(page).to_have_url(re.compile(r"sort=-val"))
    expect(page.locator("tbody tr").first).to_have_attribute("data-run-id", str(run["id"]))
    expect(page.locator("tbody tr").nth(1)).to_have_attribute("data-run-id", str(lower["id"]))
    shot(page, "runs-table")
    assert not page.errors


def test_run_charts_grow_and_click_opens_samples(page, server):
    rng = random.Random(2)
    run = seeded_run(server.api, "growing", steps=5, samples_at=(3,), finish=False)
    page.goto(f"{server.url}/runs/{run['id']}")
    expect(page.locator('[data-chart="score"]')).to_be_visible()
    page.wait_for_function("() => Number(document.querySelector('[data-chart=\"score\"]')?.dataset.points) >= 10")
    before = chart_points(page, "score")
    for s in range(6, 11):  # the run trains on: points arrive over SSE and are appended to the traces
        server.api.metrics(run, step_metrics(s, 20, rng))
        time.sleep(0.2)
    page.wait_for_function(f"() => Number(document.querySelector('[data-chart=\"score\"]').dataset.points) >= {before + 10}")
    expect(page.locator(".log-tail")).to_contain_text("Step 5")
    shot(page, "run-page")
    page.emulate_media(color_scheme="dark")  # follows the system scheme
    page.wait_for_function("() => matchMedia('(prefers-color-scheme: dark)').matches")
    shot(page, "run-page-dark", full_page=False)
    page.emulate_media(color_scheme="light")
    # a click on a point of step 3 opens that step's samples
    page.evaluate("""() => {
        const gd = document.querySelector('[data-chart="score"] .plot');
        gd.emit('plotly_click', {points: [{x: 3, y: 0.5, customdata: 3, data: {name: gd.data[0].name}}]});
    }""")
    expect(page).to_have_url(f"{server.url}/runs/{run['id']}/samples?step=3")
    expect(page.locator(".sample-card").first).to_be_visible()
    assert not page.errors


def test_samples_of_a_step_groups_and_tokens(page, server):
    run = seeded_run(server.api, "samples-run")
    page.goto(f"{server.url}/runs/{run['id']}/samples?step=4")
    expect(page.get_by_text("Step 4", exact=True)).to_be_visible()
    cards = page.locator(".sample-card")
    expect(cards).to_have_count(16)
    # the slider moves to another step, and the URL follows (a shareable link)
    page.locator("#step-slider").focus()
    page.keyboard.press("ArrowRight")
    expect(page).to_have_url(f"{server.url}/runs/{run['id']}/samples?step=6")
    # GRPO group view: 4 groups of 4 answers, each with its mean and the n - 1 std of the scores served
    page.get_by_role("button", name="groups").click()
    groups = page.locator("[data-group]")
    expect(groups).to_have_count(4)
    expect(page.locator(".sample-card").first).to_contain_text("step 6")  # not step 4's answers, kept while loading
    served = server.api.get(f"/api/v1/runs/{run['id']}/samples?step=6&split=train&prompt_index=0")["data"]
    scores = [x["score"] for x in served]
    mean = sum(scores) / len(scores)
    std = 0.0 if len(set(scores)) == 1 else (sum((x - mean) ** 2 for x in scores) / (len(scores) - 1)) ** 0.5
    assert float(groups.first.get_attribute("data-mean")) == pytest.approx(mean)
    assert float(groups.first.get_attribute("data-std")) == pytest.approx(std)
    # token view: each token's shade value and hover text are the logged log-prob
    card = page.locator(".sample-card").first
    sample = server.api.get(f"/api/v1/runs/{run['id']}/samples/{card.get_attribute('data-sample-id')}")
    card.get_by_role("button", name="tokens").click()
    tokens = card.locator(".token")
    expect(tokens).to_have_count(len(sample["tokens"]))
    for i, (text, lp) in enumerate(zip(sample["tokens"], sample["old_log_probs"])):
        assert tokens.nth(i).inner_text() == text
        assert float(tokens.nth(i).get_attribute("data-value")) == pytest.approx(lp)
        shown = re.search(r"^log-prob (\S+)$", tokens.nth(i).get_attribute("title"), re.MULTILINE).group(1)
        assert float(shown) == pytest.approx(lp, rel=1e-3, abs=1e-6)
    # KL shading: old - ref per token
    page.locator("select", has=page.locator("option", has_text="KL to reference")).select_option("kl")
    kl = sample["old_log_probs"][0] - sample["ref_log_probs"][0]
    # the shading changes on the next render: wait for the first token to carry the KL, then check it
    first_token = f'.sample-card[data-sample-id="{sample["id"]}"] .token'
    page.wait_for_function("([sel, want]) => { const t = document.querySelector(sel);"
                           " return t !== null && Math.abs(Number(t.getAttribute('data-value')) - want) < 1e-6; }",
                           arg=[first_token, kl])
    assert float(card.locator(".token").first.get_attribute("data-value")) == pytest.approx(kl)
    expect(page.locator(".token-legend").first).to_be_visible()
    shot(page, "samples-groups-tokens")
    # filters: only correct answers
    page.goto(f"{server.url}/runs/{run['id']}/samples?step=8&min=1")
    expect(page.locator(".sample-card").first).to_be_visible()
    scores = page.locator(".sample-card .badge[title=score]").all_inner_texts()
    assert scores and all(s == "1" for s in scores)
    assert not page.errors


def test_side_by_side_two_steps(page, server):
    run = seeded_run(server.api, "sbs-run")
    page.goto(f"{server.url}/side-by-side?a={run['id']}:2&b={run['id']}:8")
    expect(page.get_by_text("Prompt #0")).to_be_visible()
    expect(page.locator("[data-sbs-question]")).to_contain_text("What is 10 + 3?")
    expect(page.locator("[data-row]")).to_have_count(4)
    assert page.locator("ins.diff-added, del.diff-removed").count() > 0  # word-level diff highlighted
    shot(page, "side-by-side")
    page.keyboard.press("ArrowRight")
    expect(page.get_by_text("Prompt #1")).to_be_visible()
    expect(page).to_have_url(re.compile(r"[?&]p=1(&|$)"))
    page.keyboard.press("j")
    expect(page.get_by_text("Prompt #2")).to_be_visible()
    page.keyboard.press("ArrowLeft")
    expect(page.get_by_text("Prompt #1")).to_be_visible()
    assert not page.errors


def test_compare_two_runs_config_diff(page, server):
    a = seeded_run(server.api, "cmp-a", lr="1e-4", seed=3)
    b = seeded_run(server.api, "cmp-b", lr="3e-4", kl=0.3, seed=4)
    page.goto(f"{server.url}/compare?runs={a['id']},{b['id']}")
    expect(page.locator('[data-chart="score"]')).to_be_visible()
    diff = page.locator(".diff-table tbody tr")
    expect(diff).to_have_count(1)  # only the differing key
    expect(page.locator('.diff-table tr[data-key="actor_rollout_ref.actor.optim.lr"]')).to_contain_text("0.0003")
    expect(page.locator(".summary-table")).to_contain_text("critic/score/mean")
    shot(page, "compare")
    # selecting from the runs table leads to the same view
    page.goto(server.url + "/")
    page.get_by_label("select cmp-a").check()
    page.get_by_label("select cmp-b").check()
    page.get_by_role("button", name="Compare (2)").click()
    expect(page).to_have_url(f"{server.url}/compare?runs={a['id']},{b['id']}")
    assert not page.errors


# each drawn line of a chart: what it draws (meta "run|key") and its x values, dates as epoch seconds
DRAWN_X = """(chart) => [...document.querySelectorAll(`[data-chart="${chart}"] .js-plotly-plot`)].flatMap((gd) =>
    (gd.data || []).filter((t) => t.meta).map((t) => ({ meta: t.meta,
        x: [...t.x].map((v) => (v instanceof Date ? v.getTime() / 1000 : typeof v === "string" ? Date.parse(v) / 1000 : v)) })))"""


def test_compare_time_axis_draws_the_wall_times(page, server):
    """On a step axis the chart query leaves the wall times out (wall_times=false, a third of the payload); switched
    to time, the page asks again with them and every line's x is the API's wall times."""
    runs = [seeded_run(server.api, f"wall-{i}", seed=10 + i, steps=6) for i in range(2)]
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/v1/metrics?" in r.url else None)
    page.goto(f"{server.url}/compare?runs={runs[0]['id']},{runs[1]['id']}")
    expect(page.locator('[data-chart="score"] .plot[data-ready="true"]')).to_be_visible()
    assert asked and all("wall_times=false" in u for u in asked), asked
    step_lines = page.evaluate(DRAWN_X, "score")
    assert len(step_lines) >= 2 and all(line["x"] == [1, 2, 3, 4, 5, 6] for line in step_lines), step_lines

    page.get_by_label("X axis").select_option("time")
    expect(page).to_have_url(re.compile(r"[?&]x=time(&|$)"))
    walls = {}
    for line in step_lines:  # each drawn series' wall times, as the API has them
        run_id, key = line["meta"].split("|", 1)
        walls[line["meta"]] = server.api.get(f"/api/v1/runs/{run_id}/metrics?key={key}")["data"][0]["wall_times"]
        assert len(walls[line["meta"]]) == 6

    def drawn_as_api():
        lines = {line["meta"]: line["x"] for line in page.evaluate(DRAWN_X, "score")}
        return lines.keys() == walls.keys() and all(
            len(lines[m]) == len(w) and all(abs(a - b) < 1e-3 for a, b in zip(lines[m], w)) for m, w in walls.items())
    wait_for(drawn_as_api, 30, what="the score chart's x = the API's wall times")
    assert any("wall_times=false" not in u for u in asked), asked  # the time axis asked with them
    assert not page.errors


def test_new_run_form_paste_and_inline_server_error(page, server):
    page.goto(server.url + "/runs/new")
    expect(page.locator('[data-preset="demo_ppo"]')).to_have_attribute("aria-pressed", "true")  # the first demo: PPO
    batch = page.locator('[data-key="data.train_batch_size"]')
    expect(batch).to_have_value("256")
    page.locator("#paste-command").fill(
        "PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo \\\n data.train_batch_size=16 \\\n"
        " actor_rollout_ref.actor.optim.lr=3e-4 trainer.logger=['console'] 2>&1 | tee log.txt")
    page.get_by_role("button", name="Fill the form").click()
    # a whole command means verl's defaults underneath, and the page says so; one click lays it over the demo
    status = page.get_by_role("status").filter(has_text="values filled")
    expect(status).to_contain_text("3 values filled over verl's defaults")
    expect(page.locator("[data-paste-replaced=demo_ppo]")).to_be_visible()
    page.get_by_role("button", name=re.compile("Lay the command over Tiny arithmetic demo · PPO")).click()
    expect(page.locator('[data-preset="demo_ppo"]')).to_have_attribute("aria-pressed", "true")
    expect(status).to_contain_text("3 values filled over the preset Tiny arithmetic demo · PPO")
    kept = page.locator("[data-paste-kept] li")
    # the preset's values that differ from the defaults (gae and n=1 are verl's defaults too)
    expect(kept.filter(has_text="algorithm.use_kl_in_reward=true")).to_have_count(1)
    expect(kept.filter(has_text="algorithm.kl_ctrl.target_kl=0.08")).to_have_count(1)
    expect(kept.filter(has_text="data.train_batch_size")).to_have_count(0)  # the command set that one
    expect(batch).to_have_value("16")
    expect(page.locator('[data-key="actor_rollout_ref.actor.optim.lr"]')).to_have_value("0.0003")
    # a client-side type error is shown at the field before anything is sent
    batch.fill("abc")
    expect(page.locator('[data-field="data.train_batch_size"] .field-error')).to_contain_text("integer")
    # the server refuses a config that type-checks: its 422 lands at the field it names
    batch.fill("16")
    page.locator("#run-name").fill("form-run")
    page.get_by_role("button", name="Launch run").click()
    err = page.locator('[data-field="actor_rollout_ref.actor.ppo_mini_batch_size"] .field-error')
    expect(err).to_contain_text("larger than data.train_batch_size")
    shot(page, "new-run-422")
    page.locator('[data-key="actor_rollout_ref.actor.ppo_mini_batch_size"]').fill("16")
    page.locator('[data-key="actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]').fill("32")
    page.get_by_role("button", name="Launch run").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+$"))
    run_id = int(page.url.rsplit("/", 1)[1])
    run = server.api.get(f"/api/v1/runs/{run_id}")
    assert run["name"] == "form-run" and run["preset"] == "demo_ppo"
    assert run["resolved_config"]["data"]["train_batch_size"] == 16
    assert run["resolved_config"]["actor_rollout_ref"]["actor"]["optim"]["lr"] == 3e-4
    # fork: the form opens prefilled from the run
    page.goto(f"{server.url}/runs/new?fork={run_id}")
    expect(page.locator('[data-key="data.train_batch_size"]')).to_have_value("16")
    expect(page.locator("#run-name")).to_have_value("form-run-fork")
    assert not page.errors


def seed_command(**paths: str) -> str:
    """The README's "The seed's command" (verl's PPO quick start), with the given keys' values replaced."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## The seed's command", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    command = "\n".join(line for line in block.splitlines() if "engine.data.gsm8k" not in line)
    for key, value in paths.items():
        command, n = re.subn(rf"{re.escape(key)}=\S+", f"{key}={value}", command)
        assert n == 1, key
    return command


def test_pasted_seed_command_runs_ppo_with_a_critic_not_the_demo(page, server):
    command = seed_command(**{"data.train_files": "builtin:arith/train.parquet", "data.val_files": "builtin:arith/test.parquet",
                              "actor_rollout_ref.model.path": "builtin:tiny", "critic.model.path": "builtin:tiny"})
    page.goto(server.url + "/runs/new")
    expect(page.locator('[data-preset="demo_ppo"]')).to_have_attribute("aria-pressed", "true")  # as on arrival
    page.locator("#paste-command").fill(command)
    page.get_by_role("button", name="Fill the form").click()
    keys = len(re.findall(r"^\s+[\w.]+=", command, re.MULTILINE))
    assert keys >= 20
    expect(page.get_by_role("status").filter(has_text="values filled")).to_contain_text(f"{keys} values filled over verl's defaults")
    expect(page.get_by_role("button", name=re.compile("Engine defaults"))).to_have_attribute("aria-pressed", "true")
    expect(page.locator('[data-key="algorithm.adv_estimator"]')).to_have_value("gae")
    expect(page.locator('[data-key="data.train_batch_size"]')).to_have_value("256")
    shot(page, "new-run-seed-command")
    page.locator("#run-name").fill("seed-command")
    page.get_by_role("button", name="Launch run").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+$"))
    run = server.api.get(f"/api/v1/runs/{int(page.url.rsplit('/', 1)[1])}")
    rc = run["resolved_config"]
    assert run["preset"] is None
    assert rc["algorithm"]["adv_estimator"] == "gae" and rc["actor_rollout_ref"]["rollout"]["n"] == 1
    assert rc["critic"]["model"]["path"] == "builtin:tiny" and rc["critic"]["optim"]["lr"] == 1e-5
    assert rc["algorithm"]["kl_ctrl"]["kl_coef"] == 0.001 and rc["data"]["train_batch_size"] == 256
    assert not page.errors


def test_model_text_is_never_html(page, server):
    run = server.api.external_run("xss", tags=["ui"])
    sample = step_samples(1, random.Random(5), prompts=1, n=2)
    sample[0]["response"] = XSS
    sample[0]["prompt"] = XSS
    sample[0]["tokens"] = ["<img src=x onerror=alert(1)>", "<script>alert(1)</script>"]
    sample[0]["old_log_probs"] = [-0.1, -0.2]
    sample[1]["response"] = "fine"
    server.api.samples(run, sample)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{server.url}/runs/{run['id']}/samples?step=1")
    card = page.locator(".sample-card").first
    expect(card.locator(".response .model-text")).to_have_text(XSS)
    expect(card.locator(".question .model-text")).to_have_text(XSS)  # the question, shown with every answer
    card.get_by_role("button", name="tokens").click()
    expect(card.locator(".token").nth(1)).to_have_text("<script>alert(1)</script>")
    page.get_by_role("button", name="groups").click()
    page.goto(f"{server.url}/side-by-side?a={run['id']}:1&b={run['id']}:1")
    expect(page.locator("[data-row]").first).to_contain_text("<script>alert(1)</script>")
    time.sleep(0.5)
    shot(page, "xss-literal")
    assert page.locator(".model-text img, .model-text script").count() == 0
    assert page.evaluate("document.querySelectorAll('img[src=\"x\"]').length") == 0
    assert dialogs == []
    assert not page.errors
