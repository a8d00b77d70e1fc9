"""Tool safety: the calculator never evaluates model text as Python; the sandbox's time, memory and file limits
hold; a tool that raises or hangs answers with an error message and the caller goes on."""
import threading
import time

import pytest

from engine.config import ConfigError
from engine.tools import Tool, load_tools, run_tool
from engine.tools.calculator import CalculatorError, CalculatorTool, evaluate
from engine.tools.sandbox import PythonSandboxTool, run_python

SCHEMA = {"type": "function", "function": {"name": "t", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


@pytest.mark.parametrize("expression, value", [
    ("12*34", 408), ("123 * 456", 56088), ("-(2+3)*4", -20), ("7/2", 3.5), ("7//2", 3), ("2**10", 1024),
    ("10 % 4", 2), ("1.5*2", 3.0)])
def test_calculator_evaluates_arithmetic(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize("expression, words", [
    ("__import__('os').system('echo hi')", "Call"), ("open('/etc/passwd')", "Call"), ("x+1", "Name"),
    ("(1).__class__", "Attribute"), ("[1][0]", "Subscript"), ("lambda: 1", "Lambda"), ("'a'*3", "Constant"),
    ("9**9**9", "exponent too large"), ("10**200", "too large"), ("2**1000", "too large"),
    ("1/0", "division by zero"), ("1e308*10", "not a finite number"), ("1+", "not an arithmetic expression"),
    ("", "empty"), ("1+" * 150 + "1", "longer than 200")])
def test_calculator_refuses_anything_else(expression, words):
    with pytest.raises(CalculatorError, match=words):
        evaluate(expression)


def test_calculator_tool_answers_errors_as_text():
    tool = CalculatorTool({}, SCHEMA)
    assert run_tool(tool, {"expression": "12*34"})[0].text == "408"
    result, _ = run_tool(tool, {"expression": "__import__('os')"})
    assert result.error and result.text.startswith("error: not allowed")


def test_sandbox_runs_code_in_a_temporary_directory():
    result = run_python("import os; print(sum(range(10)), os.getcwd())", timeout=10)
    total, cwd = result.text.split()
    assert result.error is None and total == "45" and "rlstudio-sandbox-" in cwd
    import os
    assert not os.path.exists(cwd)  # removed afterwards


def test_sandbox_time_limit_kills_a_loop():
    start = time.perf_counter()
    result = run_python("while True: pass", timeout=1)
    assert result.error == "timed out after 1 s" and time.perf_counter() - start < 5


def test_sandbox_memory_limit():
    result = run_python("x = bytearray(1 << 30); print('allocated')", timeout=10, memory_mb=128)
    assert result.error == "MemoryError (memory limit)" and "\nallocated" not in result.text


def test_sandbox_refuses_network_and_processes():
    net = run_python("import socket; socket.create_connection(('127.0.0.1', 9))", timeout=10)
    assert net.error and "network access is disabled" in net.text
    fork = run_python("import subprocess; subprocess.run(['true'])", timeout=10)
    assert fork.error is not None


def test_sandbox_tool_reads_its_config():
    tool = PythonSandboxTool({"timeout": 1, "memory_mb": 64}, {"type": "function", "function": {
        "name": "python", "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                                         "required": ["code"]}}})
    assert run_tool(tool, {"code": "print(6*7)"})[0].text == "42\n"
    assert run_tool(tool, {"code": "import time; time.sleep(60)"})[0].error == "timed out after 1 s"


class Raises(Tool):
    def execute(self, arguments):
        raise RuntimeError("boom")


class Hangs(Tool):
    def execute(self, arguments):
        threading.Event().wait()  # forever


class Rewards(Tool):
    def execute(self, arguments):
        return "ok", 0.5, {"calls": 1}


def test_a_raising_tool_answers_with_the_error():
    result, _ = run_tool(Raises({}, SCHEMA), {})
    assert result.error == "RuntimeError: boom" and result.text == "error: RuntimeError: boom"


def test_a_hanging_tool_times_out_and_the_caller_goes_on():
    start = time.perf_counter()
    result, seconds = run_tool(Hangs({"timeout": 0.3}, SCHEMA), {})
    # the tool never returns: getting an answer at all is the point (60 s is a hang guard, not a speed check)
    assert result.error == "timed out after 0.3 s" and seconds >= 0.3 and time.perf_counter() - start < 60


def test_a_tool_may_give_a_reward():
    result, _ = run_tool(Rewards({}, SCHEMA), {})
    assert (result.text, result.reward, result.metrics) == ("ok", 0.5, {"calls": 1})


def test_tool_config_in_verls_format(tmp_path):
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[2] / "engine" / "tools" / "configs"
    (calc,) = load_tools(str(shipped / "calculator.yaml"))
    assert calc.name == "calculator" and calc.tag == "c" and calc.main_parameter == "expression"
    (py,) = load_tools(str(shipped / "python_sandbox.yaml"))
    assert py.name == "python" and py.code_timeout == 5
    bad = tmp_path / "bad.yaml"
    for text, words in [("tools: []", "non-empty list"), ("tools:\n  - config: {}", "class_name"),
                        ("tools:\n  - class_name: engine.tools.nope.Tool\n    tool_schema: {type: function, function: {name: x}}",
                         "cannot import"),
                        ("tools:\n  - class_name: collections.OrderedDict\n    tool_schema: {function: {name: x}}",
                         "not a subclass")]:
        bad.write_text(text)
        with pytest.raises(ConfigError, match=words):
            load_tools(str(bad))
    with pytest.raises(ConfigError, match="tool_config_path='/nope.yaml': no such file"):
        load_tools("/nope.yaml")
    with pytest.raises(ConfigError, match="tool_config_path is not set"):
        load_tools(None)


def test_builtin_tool_configs_resolve_wherever_the_job_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a job's working directory need not be the repository
    (tool,) = load_tools("builtin:tools/calculator_tiny.yaml")
    assert tool.name == "calculator" and tool.config["close"] == "1"
    with pytest.raises(ConfigError, match="no such built-in tool config; built in: .*builtin:tools/calculator.yaml"):
        load_tools("builtin:tools/nope.yaml")
