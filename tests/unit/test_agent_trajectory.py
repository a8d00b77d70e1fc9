"""Multi-turn trajectories: the layout's masks token by token against a hand-built trajectory (pure functions),
the call formats, the turn records and the multi-turn metrics."""
import pytest
import torch

from engine.protocol import Batch
from engine.rollout.formats import CompactFormat, HermesFormat, make_format
from engine.rollout.metrics import agent_metrics
from engine.rollout.trajectory import ASSISTANT, TOOL, Segment, Trajectory, layout, turns_record
from engine.tools.calculator import CalculatorTool

PAD = 0


def calculator(**config):
    tool = CalculatorTool(config, {"type": "function", "function": {
        "name": "calculator", "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                                             "required": ["expression"]}}})
    tool.tag = str(tool.config.get("tag", tool.name))
    return tool


def hand_built() -> Trajectory:
    # model: "<c>1*2</c>" as ids 11..17 (log-probs -0.1..-0.7); tool: "=2\n" as 21..23; model: "2<eos>" as 31, 2
    return Trajectory([
        Segment(ASSISTANT, [11, 12, 13, 14, 15, 16, 17], [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7]),
        Segment(TOOL, [21, 22, 23], tool="calculator", arguments={"expression": "1*2"}, latency_s=0.25),
        Segment(ASSISTANT, [31, 2], [-1.0, -2.0]),
    ])


def test_layout_masks_token_by_token():
    out = layout([hand_built(), Trajectory([Segment(ASSISTANT, [5, 2], [-0.5, -0.25])])], width=14, pad_id=PAD)
    assert out["responses"][0].tolist() == [11, 12, 13, 14, 15, 16, 17, 21, 22, 23, 31, 2, PAD, PAD]
    assert out["response_mask"][0].tolist() == [1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0]
    assert out["response_attention"][0].tolist() == [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    expected_lp = [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7, 0, 0, 0, -1.0, -2.0, 0, 0]
    assert out["rollout_log_probs"][0].tolist() == pytest.approx(expected_lp)
    # a single-turn row is the single-turn layout: mask == attention up to the end token
    assert out["responses"][1].tolist() == [5, 2] + [PAD] * 12
    assert out["response_mask"][1].tolist() == out["response_attention"][1].tolist() == [1, 1] + [0] * 12


def test_layout_refuses_a_trajectory_over_the_budget():
    with pytest.raises(ValueError, match="more than the response width 11"):
        layout([hand_built()], width=11, pad_id=PAD)


def test_turns_record_spans_and_metrics():
    turns = turns_record(hand_built())
    assert turns == [{"role": "assistant", "start": 0, "end": 7},
                     {"role": "tool", "start": 7, "end": 10, "tool": "calculator", "arguments": {"expression": "1*2"},
                      "error": None, "latency_s": 0.25},
                     {"role": "assistant", "start": 10, "end": 12}]
    failed = [{"role": "assistant", "start": 0, "end": 3},
              {"role": "tool", "start": 3, "end": 9, "tool": "calculator", "arguments": {}, "error": "timed out",
               "latency_s": 0.75}]
    batch = Batch(meta={"turns": [turns, failed, [{"role": "assistant", "start": 0, "end": 2}]]})
    m = agent_metrics(batch)
    assert m["num_turns/min"] == 2 and m["num_turns/max"] == 4 and m["num_turns/mean"] == pytest.approx(3)
    assert m["tool_call_counts/mean"] == pytest.approx(2 / 3) and m["tool_call_counts/max"] == 1
    assert m["tool_call_counts/calculator"] == 2 and m["tool/use_fraction"] == pytest.approx(2 / 3)
    assert m["tool/error_rate"] == 0.5 and m["tool/latency_s/mean"] == 0.5 and m["tool/latency_s/max"] == 0.75
    assert agent_metrics(Batch(meta={"x": [1]})) == {}


def test_compact_format_ends_the_turn_after_the_call():
    fmt = CompactFormat([calculator(tag="c")], tokenizer=None)
    text = "<c>12*34</c>=99 more"
    assert fmt.turn_end(text) == len("<c>12*34</c>")
    (call,) = fmt.parse(text)
    assert call.tool == "calculator" and call.arguments == {"expression": "12*34"}
    assert fmt.parse("408") == [] and fmt.turn_end("<c>12*3") is None
    assert fmt.render(["408"], text) == "=408\n"
    custom = CompactFormat([calculator(open="", close="1")], tokenizer=None)
    assert custom.turn_end("731") == 3 and custom.parse("731")[0].arguments == {"expression": "73"}


def test_hermes_format_reads_json_calls_and_renders_with_the_chat_template():
    from engine.models.tokenizer import CHAT_TEMPLATE, build_char_tokenizer

    tok = build_char_tokenizer()
    tok.chat_template = CHAT_TEMPLATE  # Qwen's layout (newlines after the end token)
    fmt = make_format("hermes", [calculator()], tok)
    text = ('<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
            '<tool_call>{"name": "nope", "arguments": {}}</tool_call><tool_call>not json</tool_call>')
    good, unknown, unreadable = fmt.parse(text)
    assert good.tool == "calculator" and good.arguments == {"expression": "2+2"}
    assert unknown.tool is None and "unknown tool 'nope'" in unknown.error
    assert unreadable.tool is None and "could not read" in unreadable.error
    assert isinstance(fmt, HermesFormat) and fmt.turn_end(text) is None
    # after the model's <|im_end|>: the template's newline, the tool message, the next assistant header
    assert fmt.render(["4"], text) == "\n<|im_start|>tool\n4<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(ValueError, match="multi_turn.format='xml'"):
        make_format("xml", [], tok)


def test_rollout_layout_feeds_masked_tool_tokens_to_attention_only():
    """The actor's loss sees response_mask; the forward sees attention_mask: tool tokens are in one, not the
    other."""
    out = layout([hand_built()], width=12, pad_id=PAD)
    tool = torch.tensor([0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0], dtype=torch.bool)
    assert not out["response_mask"][0][tool].any() and out["response_attention"][0][tool].all()
