"""The tool interface and the one place tools are run: with a time limit, turning any failure into a message.

A tool subclasses `Tool` and implements `execute(arguments) -> ToolResult | str`. It is built from its entry in
the tool config: `config` (a dict of the tool's own options; `timeout` in seconds is read here, default 10) and
`tool_schema` (OpenAI's `{type: function, function: {name, description, parameters}}`). A tool may give a reward
(`ToolResult.reward`); the rewards of a trajectory's calls are added to its score.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TIMEOUT_S = 10.0


@dataclass
class ToolResult:
    text: str
    reward: float = 0.0
    error: str | None = None          # set when the call failed: the text then says why, for the model
    metrics: dict[str, float] = field(default_factory=dict)


class Tool:
    def __init__(self, config: dict | None = None, tool_schema: dict | None = None):
        self.config = dict(config or {})
        self.tool_schema = dict(tool_schema or {})
        function = self.tool_schema.get("function") or {}
        self.name = str(function.get("name") or type(self).__name__)
        self.timeout = float(self.config.get("timeout", DEFAULT_TIMEOUT_S))
        params = (function.get("parameters") or {})
        required = list(params.get("required") or [])
        # the parameter a bare argument string fills (compact format): the first required one
        self.main_parameter = required[0] if required else next(iter(params.get("properties") or {}), "input")

    def execute(self, arguments: dict[str, Any]) -> ToolResult | str:
        raise NotImplementedError


def _finish(value) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, tuple) and value:  # (text, reward[, metrics]) as verl's tools return
        text, reward = str(value[0]), float(value[1]) if len(value) > 1 else 0.0
        return ToolResult(text, reward, metrics=dict(value[2]) if len(value) > 2 else {})
    return ToolResult(str(value))


def run_tools(calls: list[tuple[Tool, dict[str, Any]]]) -> list[tuple[ToolResult, float]]:
    """Runs the calls at once, each in a daemon thread, each waited for at most its tool's `timeout` seconds;
    returns (result, seconds) per call, in order. A raise becomes an error result naming the exception; a call
    still running at its limit is left behind (a daemon thread never holds up the run or its exit) and answered
    with a timed-out error."""
    answers: list[queue.Queue] = [queue.Queue(maxsize=1) for _ in calls]

    def target(tool: Tool, arguments: dict, box: queue.Queue) -> None:
        try:
            box.put(("ok", tool.execute(arguments), time.perf_counter()))
        except BaseException as exc:  # noqa: BLE001 - any failure of the tool is a message to the model
            box.put(("error", f"{type(exc).__name__}: {exc}", time.perf_counter()))

    start = time.perf_counter()
    for (tool, arguments), box in zip(calls, answers):
        threading.Thread(target=target, args=(tool, arguments, box), name=f"tool-{tool.name}", daemon=True).start()
    out = []
    for (tool, _), box in zip(calls, answers):
        try:
            kind, value, done = box.get(timeout=max(0.0, start + tool.timeout - time.perf_counter()))
        except queue.Empty:
            message = f"timed out after {tool.timeout:g} s"
            out.append((ToolResult(f"error: {message}", error=message), time.perf_counter() - start))
            continue
        elapsed = done - start
        if kind == "error":
            out.append((ToolResult(f"error: {value}", error=value), elapsed))
        else:
            out.append((_finish(value), elapsed))
    return out


def run_tool(tool: Tool, arguments: dict[str, Any]) -> tuple[ToolResult, float]:
    """One call (run_tools)."""
    return run_tools([(tool, arguments)])[0]
