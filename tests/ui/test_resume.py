"""Resume from the browser with a real run: the demo trains with a checkpoint every 2 steps, is held right
after its step-2 checkpoint (the tests' step gate on the trainer's after-step hook, tests/step_hold.py) and
cancelled there from the run page; Resume on that page starts a child run that continues at step 3 with the prompts an uncut run saw
at steps 3 and 4, and the child's charts draw the parent's steps 1-2 and its own 3-4, with no gap.
The runs train in `colocate_async` one batch ahead (issue 29): the harder case, since at the checkpoint step 3's
prompts are already in flight on the rollout thread; the resume must reissue them (the sync loop's resume is
covered by the engine's tests, tests/integration/test_train_cpu.py). Their staleness chart shows the lag.
Each job trains its one worker in the job's own process (`ray_init.mode=in_process`: no worker actor to start per job;
what is tested here is the run page's cancel and resume, and the async loop's resume, not Ray's workers), on a small
batch (8 prompts x 2 answers) for the same reason.
Slow (three real training jobs on CPU): marked `slow`."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.ui.conftest import shot
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

STEPS, CHECKPOINT = 4, 2
OVERRIDES = [f"trainer.total_training_steps={STEPS}", f"trainer.save_freq={CHECKPOINT}", "trainer.test_freq=-1",
             "trainer.val_before_train=false", "trainer.use_v1=True", "trainer.v1.trainer_mode=colocate_async",
             "trainer.v1.sampler.max_off_policy_threshold=2",  # one batch ahead
             "ray_init.mode=in_process",
             # 8 prompts x 2 answers a step instead of the demo's 32 x 8: the prompts, steps and staleness compared
             # below do not depend on the batch's size
             "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.rollout.n=2"]
TERMINAL = ("succeeded", "failed", "lost", "cancelled")


def finished(srv, run_id: int) -> dict:
    run = wait_for(lambda: (r := srv.api.get(f"/api/v1/runs/{run_id}"))["status"] in TERMINAL and r, 900, 0.5,
                   f"run {run_id} to finish")
    assert run["status"] == "succeeded", (run["error"], run["log_tail"])
    return run


def score_steps(srv, run_id: int) -> list[int]:
    series = srv.api.get(f"/api/v1/runs/{run_id}/metrics?key=critic/score/mean")["data"]
    return series[0]["steps"] if series else []


def train_prompts(srv, run_id: int, step: int) -> list[tuple[int, str]]:
    page = srv.api.get(f"/api/v1/runs/{run_id}/samples?split=train&step={step}&limit=1000")
    assert page["count"] == len(page["data"]) > 0
    return sorted((s["prompt_index"], s["prompt"]) for s in page["data"])


def test_cancel_at_a_checkpoint_then_resume_from_the_run_page(page, dispatch_server):
    srv = dispatch_server
    launch = {"preset": "demo", "overrides": OVERRIDES, "experiment_name": "ui-resume"}
    uncut = srv.api.call("POST", "/api/v1/runs", {**launch, "name": "uncut"})
    finished(srv, uncut["id"])

    gate = srv.hold / f"step-{CHECKPOINT}"
    gate.touch()  # the next run stops after its step-2 checkpoint
    try:  # the server is shared: no later run may meet the gate
        cut = srv.api.call("POST", "/api/v1/runs", {**launch, "name": "cut"})
        wait_for(lambda: (srv.hold / f"held-{CHECKPOINT}").exists(), 900, 0.5, "the run to hold at its checkpoint")
        page.goto(f"{srv.url}/runs/{cut['id']}")
        expect(page.locator("h1 [data-status]")).to_have_text("running")
        page.get_by_role("button", name="Cancel").click()
        expect(page.locator("h1 [data-status]")).to_have_text("cancelled")
    finally:
        gate.unlink()
    assert score_steps(srv, cut["id"]) == [1, 2]

    page.get_by_role("button", name="Resume").click()
    expect(page).to_have_url(re.compile(rf"/runs/(?!{cut['id']}$)\d+$"))  # the child's page
    child_id = int(page.url.rsplit("/", 1)[1])
    assert child_id not in (uncut["id"], cut["id"])
    expect(page.locator(".run-meta")).to_contain_text(f"resume of run {cut['id']}")
    expect(page.locator("h1 [data-status]")).to_have_text("succeeded", timeout=900_000)
    child = finished(srv, child_id)
    assert child["parent_id"] == cut["id"] and child["resolved_config"]["trainer"]["resume_mode"] == "resume_path"

    # continues at the next step, on the prompts the uncut run saw there
    assert score_steps(srv, child_id) == [3, 4]
    for step in (3, 4):
        assert train_prompts(srv, child_id, step) == train_prompts(srv, uncut["id"], step), step

    # its charts join the parent's: steps 1-2 (parent), then 3-4 (child), nothing missing, nothing twice
    page.reload()
    parent_name = f"run {cut['id']} (resumed from)"

    def score_traces():
        traces = page.evaluate("""() => {
            const gd = document.querySelector('[data-chart="score"] .plot');
            return gd && gd.data ? Array.from(gd.data).map((t) => ({name: t.name, x: Array.from(t.x)})) : [];
        }""")
        parent = [t for t in traces if t["name"].startswith(parent_name)]
        child = [t for t in traces if not t["name"].startswith(parent_name)]
        return (parent, child) if parent and child and all(len(t["x"]) == 2 for t in traces) else None

    parent, child = wait_for(score_traces, 300, 0.5, "the score chart to show the parent's and the child's steps")
    assert len(parent) == len(child), (parent, child)  # the same keys for both
    assert all(t["x"] == [1, 2] for t in parent), parent
    assert all(t["x"] == [3, 4] for t in child), child
    expect(page.locator('[data-chart="score"]')).to_contain_text(parent_name)
    # trained one batch behind from its second step on, the resumed one too (its first batch is on-policy again)
    staleness = srv.api.get(f"/api/v1/runs/{child_id}/metrics?key=training/off_policy/trajectory_staleness/max")
    assert staleness["data"][0]["steps"] == [3, 4] and staleness["data"][0]["values"] == [0.0, 1.0], staleness
    expect(page.locator("[data-chart=staleness]")).to_be_visible()
    shot(page, "resume-child-charts")
    assert not page.errors
