"""Tools a policy can call during a multi-turn rollout (engine/rollout/agent_loop.py).

A tool is a Python class with an OpenAI-style function schema (`Tool` in base.py); tools are declared in a YAML
file in verl's format (`actor_rollout_ref.rollout.multi_turn.tool_config_path`, loaded by registry.py). Built in:
`calculator.CalculatorTool` (arithmetic without `eval`) and `sandbox.PythonSandboxTool` (a subprocess with time,
memory and file-size limits in a temporary directory).
"""
from engine.tools.base import Tool, ToolResult, run_tool, run_tools
from engine.tools.registry import BUILTIN, load_tools, resolve_path

__all__ = ["BUILTIN", "Tool", "ToolResult", "load_tools", "resolve_path", "run_tool", "run_tools"]
