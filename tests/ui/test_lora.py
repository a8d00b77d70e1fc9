"""LoRA in the browser (issue 27): the New run form's LoRA group (built from the schema's "x-group" fields, like
every other field) sets the keys the launched run stores; the run page shows the actor's (and a critic's) trainable
vs total parameters from the facts the engine's dashboard logger reports when the run starts (its `started` status)."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from engine.loggers.dashboard import DashboardLogger
from tests.ui.conftest import shot

LORA_KEYS = ["actor_rollout_ref.model.lora_rank", "actor_rollout_ref.model.lora_alpha",
             "actor_rollout_ref.model.target_modules", "critic.model.lora_rank"]


def test_new_run_form_lora_group_sets_the_keys(page, server):
    page.goto(server.url + "/runs/new")
    expect(page.locator('[data-preset="demo_ppo"]')).to_have_attribute("aria-pressed", "true")
    group = page.locator('section[data-group="LoRA"]')
    expect(group.get_by_role("heading", name="LoRA")).to_be_visible()
    for key in LORA_KEYS:  # in the group, nowhere else (Advanced opened: still once)
        expect(group.locator(f'[data-key="{key}"]')).to_have_count(1)
    page.locator("details.card > summary").filter(has_text="Advanced").click()
    expect(page.get_by_label("filter advanced keys")).to_be_visible()
    for key in LORA_KEYS:
        expect(page.locator(f'[data-key="{key}"]')).to_have_count(1)
    # the actor's and the critic's keys under their own headings, labelled from the key, described by the schema
    expect(group.get_by_role("heading", name="actor_rollout_ref.model")).to_be_visible()
    expect(group.get_by_role("heading", name="critic.model")).to_be_visible()
    rank = group.locator('[data-key="actor_rollout_ref.model.lora_rank"]')
    expect(rank).to_have_value("0")
    expect(group.locator('[data-field="actor_rollout_ref.model.lora_rank"] label')).to_contain_text("LoRA rank")
    expect(group.locator('[data-field="actor_rollout_ref.model.lora_rank"] .help')).to_contain_text("0 = train all weights")
    expect(group.locator('[data-key="actor_rollout_ref.model.target_modules"]')).to_have_value("all-linear")

    rank.fill("-1")  # the schema's bound (ge=0) is checked before anything is sent
    expect(group.locator('[data-field="actor_rollout_ref.model.lora_rank"] .field-error')).to_contain_text("≥ 0")
    rank.fill("8")
    group.locator('[data-key="actor_rollout_ref.model.lora_alpha"]').fill("32")
    group.locator('[data-key="actor_rollout_ref.model.target_modules"]').fill("[q_proj, v_proj]")
    page.locator("summary").filter(has_text="As a command").click()
    command = page.locator("pre.log-tail")
    expect(command).to_contain_text("actor_rollout_ref.model.lora_rank=8")
    expect(command).to_contain_text("actor_rollout_ref.model.target_modules=[q_proj,v_proj]")
    shot(page, "new-run-lora")
    page.locator("#run-name").fill("lora-from-form")
    page.get_by_role("button", name="Launch run").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+$"))
    run_id = int(page.url.rsplit("/", 1)[1])
    run = server.api.get(f"/api/v1/runs/{run_id}")
    assert run["name"] == "lora-from-form" and run["preset"] == "demo_ppo"
    model = run["config"]["actor_rollout_ref"]["model"]  # what the form sent
    assert (model["lora_rank"], model["lora_alpha"], model["target_modules"]) == (8, 32, ["q_proj", "v_proj"])
    assert "critic" not in run["config"]  # untouched keys are not sent
    resolved = run["resolved_config"]
    assert resolved["actor_rollout_ref"]["model"]["lora_rank"] == 8 and resolved["critic"]["model"]["lora_rank"] == 0
    # not started yet: no parameter counts to show
    expect(page.locator("h1 [data-status]")).to_be_visible()
    expect(page.locator('[data-fact="parameters"]')).to_have_count(0)
    # a fork opens with the run's LoRA values in the group
    page.goto(f"{server.url}/runs/new?fork={run_id}")
    expect(page.locator('section[data-group="LoRA"] [data-key="actor_rollout_ref.model.lora_rank"]')).to_have_value("8")
    assert not page.errors


def started(server, run, tmp_path, **facts):
    """The engine's `started` report, sent by its own dashboard logger (engine/main_ppo.py's fields)."""
    logger = DashboardLogger(server.url, run["id"], run["ingest_token"], str(tmp_path / f"spool-{run['id']}"), quiet=True)
    logger.log_status("started", workers=1, device="cpu", roles="actor+rollout+reference", total_steps=3,
                      launcher="in-process", device_name="cpu", placement=None, **facts)
    assert logger.flush(60)
    logger.close()


def test_run_page_shows_trainable_vs_total_parameters(page, server, tmp_path):
    lora = server.api.external_run("lora-facts", overrides=["actor_rollout_ref.model.lora_rank=8"], tags=["ui"])
    page.goto(f"{server.url}/runs/{lora['id']}")
    expect(page.locator("h1 [data-status]")).to_have_text("running")
    expect(page.locator('[data-fact="parameters"]')).to_have_count(0)  # nothing reported yet
    # reported while the page is open: it appears live (the run's status event)
    started(server, lora, tmp_path, n_params=498_431_872, n_trainable_params=4_399_104)
    fact = page.locator('[data-fact="parameters"]')
    expect(fact).to_have_text("4.4M trainable / 498M parameters (0.88%)")
    expect(fact).to_have_attribute("title", "4,399,104 trainable of 498,431,872")
    expect(page.locator('[data-fact="device"]')).to_have_text("on cpu")
    shot(page, "run-lora-parameters")
    stored = server.api.get(f"/api/v1/runs/{lora['id']}")["facts"]
    assert stored["n_params"] == 498_431_872 and stored["n_trainable_params"] == 4_399_104
    page.reload()  # kept with the run
    expect(page.locator('[data-fact="parameters"]')).to_have_text("4.4M trainable / 498M parameters (0.88%)")

    # full fine-tuning: every parameter trains, and the page says so in a few words
    full = server.api.external_run("full-facts", tags=["ui"])
    started(server, full, tmp_path, n_params=494_032_768, n_trainable_params=494_032_768)
    page.goto(f"{server.url}/runs/{full['id']}")
    fact = page.locator('[data-fact="parameters"]')
    expect(fact).to_have_text("494M parameters, all trainable")
    expect(fact).to_have_attribute("title", re.compile(r"full fine-tuning"))
    expect(page.locator('[data-fact="critic-parameters"]')).to_have_count(0)  # no critic, no critic counts

    # PPO with a LoRA critic: the critic's counts beside the actor's, each named
    ppo = server.api.external_run("ppo-lora-facts", overrides=["actor_rollout_ref.model.lora_rank=8",
                                                               "critic.model.lora_rank=8"], tags=["ui"])
    started(server, ppo, tmp_path, n_params=498_431_872, n_trainable_params=4_399_104, critic_n_params=494_033_665,
            critic_n_trainable_params=4_400_001)
    page.goto(f"{server.url}/runs/{ppo['id']}")
    expect(page.locator('[data-fact="parameters"]')).to_have_text("actor 4.4M trainable / 498M parameters (0.88%)")
    critic = page.locator('[data-fact="critic-parameters"]')
    expect(critic).to_have_text("critic 4.4M trainable / 494M parameters (0.89%)")
    expect(critic).to_have_attribute("title", "4,400,001 trainable of 494,033,665")
    shot(page, "run-lora-critic-parameters")
    assert not page.errors


def test_a_late_catch_up_read_does_not_undo_a_live_status(page, server, tmp_path):
    """The run page reads the run once more when its stream opens; if that read was answered before a status event
    but lands after it, the event's news stays (it is newer). The read is held in the browser until the event shows."""
    run = server.api.external_run("late-read", tags=["ui"])
    path = f"/api/v1/runs/{run['id']}"
    reads, held = [], []

    def hold_second_read(route):
        reads.append(route.request.url)
        if len(reads) == 2:  # the catch-up read: answered now (before the status), handed to the page later
            answer = route.fetch().json()
            answer["resolved_config"]["trainer"]["project_name"] = "caught-up"  # a mark that only this read carries
            held.append((route, answer))
        else:
            route.continue_()

    page.route(lambda url: url.endswith(path), hold_second_read)
    page.goto(f"{server.url}/runs/{run['id']}")
    expect(page.locator("h1 [data-status]")).to_have_text("running")
    for _ in range(1200):  # the stream's hello starts the catch-up read
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the run page made no second read of the run after its stream opened"
    started(server, run, tmp_path, n_params=498_431_872, n_trainable_params=4_399_104)
    fact = page.locator('[data-fact="parameters"]')
    expect(fact).to_have_text("4.4M trainable / 498M parameters (0.88%)")
    route, body = held[0]
    route.fulfill(json=body)
    expect(page.locator("dd", has_text=re.compile("^caught-up$"))).to_have_count(1)  # the read landed
    expect(fact).to_have_text("4.4M trainable / 498M parameters (0.88%)")  # and the live news stayed
