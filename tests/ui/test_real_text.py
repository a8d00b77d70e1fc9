"""A real model's answers in the dashboard (issue 37): samples recorded from a real run — SmolLM2-135M-Instruct on
GSM8K, GRPO on CPU, written by the engine's file logger (tests/ui/real_run/README.md has the command) — fed to a
real server and read in Chromium on every page that shows answers: the answers' text is there, the question shows,
long answers are readable in full, and no chat-template token (`<|im_start|>`, `<|im_end|>`, …) shows raw."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from engine.loggers.dashboard import SAMPLE_FIELDS, TOKEN_ARRAYS, TRAJECTORY, VERSIONS
from tests.ui.conftest import shot

RUN = Path(__file__).parent / "real_run"
RAW_TOKENS = re.compile(r"<\|[a-z_]+\|>")


def records(name: str) -> list[dict]:
    return [json.loads(line) for line in (RUN / name).read_text().splitlines() if line.strip()]


def as_ingest(samples: list[dict]) -> list[dict]:
    """File-logger records as the dashboard logger sends them: numbered within (split, step), unknown keys (the
    scorer's `acc`) under extras."""
    known = set(SAMPLE_FIELDS) | set(TOKEN_ARRAYS) | set(TRAJECTORY) | set(VERSIONS)
    counters: dict[tuple, int] = {}
    out = []
    for s in samples:
        key = (s["split"], s["step"])
        counters[key] = counters.get(key, -1) + 1
        out.append({**{k: v for k, v in s.items() if k in known}, "sample_index": counters[key],
                    "extras": {k: v for k, v in s.items() if k not in known}})
    return out


@pytest.fixture(scope="module")
def real_run(server):
    run = server.api.external_run("smollm2-gsm8k-cpu", preset=None, tags=["real"])
    points = [{"key": k, "step": r["step"], "value": v} for r in records("metrics.jsonl")
              for k, v in r["data"].items() if isinstance(v, (int, float))]
    server.api.metrics(run, points)
    samples = records("samples.jsonl")
    server.api.samples(run, as_ingest(samples))
    server.api.status(run, "succeeded")
    return run, samples


def no_raw_tokens(page) -> None:
    text = page.locator("main").inner_text()
    found = RAW_TOKENS.findall(text)
    assert not found, f"raw special tokens shown: {sorted(set(found))}"


def opening(text: str) -> str:
    """The first words of an answer's first line (a few, so that a double space in the answer cannot matter)."""
    first = next(line for line in text.splitlines() if line.strip())
    return " ".join(first.split()[:4])


def test_real_answers_read_well_on_every_page(page, server, real_run):
    run, samples = real_run
    train = [s for s in samples if s["split"] == "train"]
    step = max(s["step"] for s in train)
    at_step = [s for s in train if s["step"] == step]
    longest = max(at_step, key=lambda s: len(s["response"]))
    assert any("<|im_end|>" in s["tokens"] for s in at_step), "fixture: no answer at this step ended with its end token"

    # samples list: a real answer's words, its question (not the template), no raw template token
    page.goto(f"{server.url}/runs/{run['id']}/samples?step={step}")
    card = page.locator(".sample-card[data-sample-id]").filter(has_text=opening(longest["response"])).first
    expect(card).to_be_visible()
    user_turn = re.search(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", longest["prompt"], re.DOTALL).group(1)
    expect(card.locator("[data-question] .question-text")).to_contain_text(" ".join(user_turn.split()[:8]))
    no_raw_tokens(page)
    shot(page, "real-samples")

    # token overlay on the longest answer, and on one that ended: its end of turn is a named marker, not raw
    card.get_by_role("button", name="tokens").click()
    expect(card.locator(".token")).to_have_count(len(longest["tokens"]))
    ended = next(s for s in at_step if "<|im_end|>" in s["tokens"])
    ended_card = page.locator(".sample-card[data-sample-id]").filter(has_text=opening(ended["response"])).first
    ended_card.get_by_role("button", name="tokens").click()
    expect(ended_card.locator(".token")).to_have_count(len(ended["tokens"]))
    expect(ended_card.locator(".token[data-special] .special-token").last).to_have_text("end of turn")
    no_raw_tokens(page)
    shot(page, "real-tokens")

    # groups: each group's question once, its answers below
    page.goto(f"{server.url}/runs/{run['id']}/samples?step={step}&view=groups")
    expect(page.locator("[data-group]").first).to_be_visible()
    expect(page.locator("[data-group] [data-question]").first).not_to_be_empty()
    no_raw_tokens(page)
    shot(page, "real-groups")

    # side by side: the validations before and after training, on the same held-out prompts
    val_steps = sorted({s["step"] for s in samples if s["split"] == "val"})
    first_val = [s for s in samples if s["split"] == "val" and s["step"] == val_steps[0]]
    page.goto(f"{server.url}/side-by-side?a={run['id']}:{val_steps[0]}&b={run['id']}:{val_steps[-1]}&split=val")
    expect(page.locator("[data-sbs-question]")).not_to_be_empty()
    expect(page.locator("main")).to_contain_text(opening(min(first_val, key=lambda s: s["prompt_index"])["response"]))
    no_raw_tokens(page)
    shot(page, "real-side-by-side")

    # What changed: questions and answers wrap; a long one is cut with a button that shows the rest
    page.goto(f"{server.url}/runs/{run['id']}/changes?a={val_steps[0]}&b={val_steps[-1]}&show=neither")
    answer = page.locator('.change-list [data-answer="a"] .long-text').first
    expect(answer).to_be_visible()
    if answer.get_attribute("data-long-text") == "cut":
        answer.get_by_role("button").click()
        expect(answer).to_have_attribute("data-long-text", "open")
    no_raw_tokens(page)
    shot(page, "real-changes")

    # Compare: the real run beside itself is enough to render its charts and summary
    page.goto(f"{server.url}/compare?runs={run['id']}")
    expect(page.locator(".summary-table")).to_be_visible()
    no_raw_tokens(page)
    shot(page, "real-compare")
    assert not page.errors


def test_new_run_form_offers_the_real_model(page, server):
    page.goto(f"{server.url}/runs/new")
    expect(page.locator('[data-preset="real_next_number"]')).to_contain_text("SmolLM2-135M-Instruct")
    field = page.locator('[data-field="actor_rollout_ref.model.path"]')
    field.locator('[data-suggestion="builtin:smollm2-135m-instruct"]').click()
    expect(field.locator("input")).to_have_value("builtin:smollm2-135m-instruct")
    expect(field.locator(".help")).to_contain_text("Apache-2.0")
    shot(page, "real-new-run")
    assert not page.errors
