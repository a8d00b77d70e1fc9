"""Multi-turn samples in the browser: trajectories made by the engine (its agent loop with the calculator and its
sample builder, tests/trajectory_samples.py), sent by the engine's dashboard logger to a real server, read on
the Samples page as conversations (turn count, tool call with its arguments, tool result, tool error), the
token view marking what the loss did not see, the turn / tool / tool-error filters, and side by side."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from engine.loggers.dashboard import DashboardLogger
from tests.trajectory_samples import multi_turn_samples
from tests.ui.conftest import shot


def test_trajectories_read_as_conversations(page, server, tmp_path):
    run = server.api.external_run("multi-turn-run", tags=["ui"])
    logger = DashboardLogger(server.url, run["id"], run["ingest_token"], str(tmp_path / "spool"), quiet=True)
    for step in (1, 2):
        logger.log_samples(step, multi_turn_samples(step=step))
    before, after = multi_turn_samples(step=0, split="val"), multi_turn_samples(step=2, split="val")
    after[0]["score"] = 1.0  # the answer that called the calculator is right at the second validation
    logger.log_samples(0, before)
    logger.log_samples(2, after)
    assert logger.flush(60)
    logger.close()
    server.api.status(run, "succeeded")

    page.goto(f"{server.url}/runs/{run['id']}/samples?step=1")
    cards = page.locator(".sample-card")
    expect(cards).to_have_count(3)
    call, failed, plain = cards.nth(0), cards.nth(1), cards.nth(2)
    # the conversation: the model's call (name and arguments), the calculator's answer, the final answer
    expect(call.locator("[data-turns]")).to_have_text("4 turns · 1 tool call (calculator)")
    expect(call.get_by_title("mean advantage over the response's tokens")).to_have_text("adv 0.5")  # model tokens only
    expect(call.locator("[data-role]")).to_have_count(3)
    expect(call.locator("[data-role=model]").first.locator(".turn-text")).to_have_text("<c>12*34</c>")
    expect(call.locator(".tool-call")).to_have_text('calls calculator(expression="12*34")')
    result = call.locator("[data-role=tool]")
    expect(result).to_have_attribute("data-error", "false")
    expect(result.locator(".turn-head")).to_contain_text("tool result")
    expect(result.locator(".turn-head")).to_contain_text("calculator")
    expect(result.locator(".turn-text")).to_have_text("=408")
    # the refused call: shown as an error, with the calculator's message
    error = failed.locator("[data-role=tool]")
    expect(error).to_have_attribute("data-error", "true")
    expect(error.locator(".turn-head")).to_contain_text("tool error")
    expect(error.locator(".turn-error-message")).to_have_text("error: division by zero")
    expect(failed.locator("[data-tool-errors]")).to_have_text("1 tool error")
    expect(failed.locator(".tool-call")).to_have_text('calls calculator(expression="7/0")')
    expect(plain.locator("[data-turns]")).to_have_text("2 turns · 0 tool calls")
    expect(plain.locator("[data-role=tool]")).to_have_count(0)
    # model turns, tool results and tool errors look different
    styles = [loc.evaluate("e => getComputedStyle(e).backgroundColor + ' ' + getComputedStyle(e).borderLeftColor")
              for loc in (call.locator("[data-role=model]").first, result, error)]
    assert len(set(styles)) == 3, styles
    shot(page, "samples-trajectories")

    # tokens: the tool's answer (=408\n) is context, the model's tokens were in the loss
    call.get_by_role("button", name="tokens").click()
    tokens = call.locator(".tokens .token")
    expect(tokens).to_have_count(21)
    context = call.locator('.tokens .token[data-loss="0"]')
    expect(context).to_have_count(5)
    assert context.all_text_contents() == ["=", "4", "0", "8", "\n"]
    expect(call.locator('.tokens .token[data-loss="1"]')).to_have_count(16)
    seen, unseen = call.locator('.tokens .token[data-loss="1"]').first, context.first
    look = "e => [getComputedStyle(e).opacity, getComputedStyle(e).fontStyle, getComputedStyle(e).textDecorationStyle]"
    assert seen.evaluate(look) != unseen.evaluate(look)
    assert "not in the loss" in unseen.get_attribute("title")
    shot(page, "samples-trajectory-tokens")

    # filters: what the user picks, the rows that come back
    count = page.locator(".row.small.muted").first
    page.get_by_label("tool error").select_option("1")
    expect(page).to_have_url(re.compile(r"tool_error=1"))
    expect(cards).to_have_count(1)
    expect(cards.first.locator("[data-role=tool]")).to_have_attribute("data-error", "true")
    expect(count).to_contain_text("1 answer to 1 prompt")
    page.get_by_label("tool error").select_option("0")
    expect(cards).to_have_count(2)
    page.get_by_label("tool error").select_option("")
    page.get_by_label("tool used").select_option("-")
    expect(cards).to_have_count(1)
    expect(cards.first.locator("[data-turns]")).to_have_text("2 turns · 0 tool calls")
    page.get_by_label("tool used").select_option("calculator")
    expect(cards).to_have_count(2)
    page.get_by_label("tool used").select_option("")
    page.get_by_label("number of turns").fill("4")
    expect(page).to_have_url(re.compile(r"turns=4"))
    expect(cards).to_have_count(2)
    page.get_by_label("number of turns").fill("2")
    expect(cards).to_have_count(1)
    expect(count).to_contain_text("1 answer to 1 prompt")
    page.get_by_label("number of turns").fill("7")
    expect(page.get_by_text("No samples match these filters.")).to_be_visible()
    # the tool filter lists the run's tools (GET /runs/{id}/tools), not only those on the page: opened on answers
    # that called no tool, it still offers the calculator
    page.goto(f"{server.url}/runs/{run['id']}/samples?step=1&tool=-")
    expect(cards).to_have_count(1)
    expect(page.get_by_label("tool used").locator("option[value=calculator]")).to_have_text("used calculator")

    # the dense table: a turns column (x: a tool call failed), sortable
    page.goto(f"{server.url}/runs/{run['id']}/samples?step=1&view=table&sort=-turns")
    cells = page.locator(".st-body .st-turns")
    expect(cells).to_have_text(["4", "4 ✗", "2"])
    expect(page.locator(".st-body [role=row]").nth(1).locator(".st-first")).to_have_text("<c>7/0</c>=error: division by zero")

    # what changed between the validations: the newly solved prompt's answer says it used the tool
    page.goto(f"{server.url}/runs/{run['id']}/changes")
    expect(page.locator('[data-kind="newly-solved"] [data-count]')).to_have_text("1")
    solved = page.locator(".change-list tbody tr")
    expect(solved).to_have_count(1)
    expect(solved.first.locator("[data-tool-tag]")).to_have_count(2)
    expect(solved.first.locator("[data-tool-tag]").first).to_have_attribute("data-tool-tag", "tool")

    # side by side: steps 1 and 2 answered the same prompts; both panes read as conversations
    page.goto(f"{server.url}/side-by-side?a={run['id']}:1&b={run['id']}:2&split=train")
    row = page.locator(".sbs-row[data-row='0']")
    expect(row.locator(".conversation")).to_have_count(2)
    expect(row.locator(".tool-call")).to_have_text(['calls calculator(expression="12*34")'] * 2)
    expect(row.locator("[data-role=tool] .turn-text")).to_have_text(["=408", "=408"])
    assert not page.errors


def test_new_run_form_has_the_multi_turn_preset_and_keys(page, server):
    """The calculator preset is listed; its multi_turn keys and tool config are in the form (generated from the
    engine's schema) and go into the run the form creates."""
    page.goto(server.url + "/runs/new")
    choice = page.locator('[data-preset="calculator_multi_turn"]')
    expect(choice).to_contain_text("Calculator tool, multi-turn")
    choice.click()
    expect(choice).to_have_attribute("aria-pressed", "true")
    page.get_by_text("Advanced").click()
    page.get_by_label("filter advanced keys").fill("multi_turn")
    expect(page.locator('[data-key="actor_rollout_ref.rollout.multi_turn.enable"]')).to_be_checked()
    expect(page.locator('[data-key="actor_rollout_ref.rollout.multi_turn.format"]')).to_have_value("compact")
    expect(page.locator('[data-key="actor_rollout_ref.rollout.multi_turn.max_assistant_turns"]')).to_have_value("3")
    tools = page.locator('[data-key="actor_rollout_ref.rollout.multi_turn.tool_config_path"]')
    expect(tools).to_have_value("builtin:tools/calculator_tiny.yaml")
    page.locator('[data-key="actor_rollout_ref.rollout.multi_turn.max_assistant_turns"]').fill("2")
    page.locator("#run-name").fill("calculator-form-run")
    page.get_by_role("button", name="Launch run").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+$"))
    run = server.api.get(f"/api/v1/runs/{int(page.url.rsplit('/', 1)[1])}")
    multi_turn = run["resolved_config"]["actor_rollout_ref"]["rollout"]["multi_turn"]
    assert run["preset"] == "calculator_multi_turn" and multi_turn["enable"] is True
    assert multi_turn["max_assistant_turns"] == 2 and multi_turn["tool_config_path"] == "builtin:tools/calculator_tiny.yaml"
    assert not page.errors
