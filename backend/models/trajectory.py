"""A multi-turn sample's conversation as stored: its turns in order, each a model turn or a tool answer.

Token spans [start, end) index the sample's `tokens` (and `loss_mask`), which run over the whole trajectory.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from backend.models.common import Count, Num, integral

Role = Literal["model", "tool"]


class ToolCall(BaseModel):
    name: str | None = Field(default=None, max_length=200, description="null: the call could not be read")
    arguments: Any = None


class Turn(BaseModel):
    role: Role
    start: Count | None = Field(default=None, description="first token of the turn in `tokens`")
    end: Count | None = Field(default=None, description="one past its last token")
    text: str = Field(default="", description="model: what the model wrote; tool: the answer as the model saw it")
    tool_calls: list[ToolCall] = Field(default_factory=list, description="model turns: the calls it made")
    tool: str | None = Field(default=None, max_length=500, description="tool turns: which tool answered")
    error: bool = Field(default=False, description="tool turns: the call failed or timed out")
    error_message: str | None = None
    latency_s: Num | None = None
    reward: Num | None = None


class TurnIn(Turn):
    """What ingest takes: a stored turn, or the engine's record (engine/rollout/trajectory.py `turns_record`:
    role 'assistant', the error as the message the model got, the calls' tool names and arguments on the tool
    turn that answered them); both are stored as `Turn`."""

    role: Literal["model", "assistant", "tool"]
    text: str | None = Field(default=None, description="null: the text of the turn's tokens")
    tool: str | list[str | None] | None = Field(default=None, description="tool turns: which tool(s) answered")
    error: bool | str | None = Field(default=False, description="true / the error message: the call failed")
    arguments: Any = Field(default=None, exclude=True, description="engine form: the arguments of the call(s)")


ROLES = {"model": "model", "assistant": "model", "tool": "tool"}


def _names(value) -> list[str | None]:
    return list(value) if isinstance(value, list) else [value]


def normalize_turns(raw: Any, tokens: list | None) -> list[dict]:
    """The engine's turn records (engine/rollout/trajectory.py `turns_record`: role assistant/tool, span, and on
    tool turns the tool, its arguments, the error message, the latency) -> stored turns. Stored turns pass
    through unchanged, so re-sending an export is idempotent. A turn without text takes its tokens' text. The
    calls go on the model turn that made them (the engine records them on the tool turn that answered)."""
    if not isinstance(raw, list):
        raise ValueError("turns: a list of turns (objects with role, start, end)")  # noqa: TRY004 - pydantic reports ValueErrors
    out: list[dict] = []
    pending_calls: list[dict | None] = []  # engine form: the calls each tool turn answered
    for i, t in enumerate(raw):
        if not isinstance(t, dict):
            raise ValueError(f"turns[{i}]: an object with role, start, end")  # noqa: TRY004
        role = ROLES.get(t["role"]) if isinstance(t.get("role"), str) else None
        if role is None:
            raise ValueError(f"turns[{i}].role: {t.get('role')!r}; use 'model' (or 'assistant') or 'tool'")
        start, end = integral(t.get("start")), integral(t.get("end"))
        for name, v in (("start", start), ("end", end)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError(f"turns[{i}].{name}: {v!r}; a token position (an integer >= 0)")
        if start is not None and end is not None:
            if end < start:
                raise ValueError(f"turns[{i}]: end {end} is before start {start}")
            if tokens is not None and end > len(tokens):
                raise ValueError(f"turns[{i}].end: {end} is past the sample's {len(tokens)} tokens")
        text = t.get("text")
        if text is None and tokens is not None and start is not None and end is not None:
            text = "".join(str(x) for x in tokens[start:end])
        # every field given stays (the model validates it); the engine's forms are rewritten
        turn = {k: v for k, v in t.items() if k != "arguments"}
        turn.update(role=role, text="" if text is None else text)
        error = t.get("error")
        if error is not None and not isinstance(error, (bool, str)):
            raise ValueError(f"turns[{i}].error: {error!r}; true/false or the error message")
        if isinstance(error, str):  # the engine's form: the message the model got, or null
            turn.update(error=True, error_message=error)
        else:
            turn["error"] = bool(error)
        names = _names(t.get("tool"))
        if any(n is not None and not isinstance(n, str) for n in names):
            raise ValueError(f"turns[{i}].tool: {t.get('tool')!r}; a tool name (or a list of names)")
        turn["tool"] = ", ".join(n for n in names if n is not None) or None
        if role == "model":
            pending_calls.append(None)
        else:
            if "arguments" in t:
                args = t["arguments"] if isinstance(t.get("tool"), list) and isinstance(t["arguments"], list) \
                    else [t["arguments"]]
                pending_calls.append([{"name": n, "arguments": a} for n, a in zip(names, args)])
            else:
                pending_calls.append(None)
        out.append(turn)
    for k, calls in enumerate(pending_calls):
        if calls and k > 0 and out[k - 1]["role"] == "model" and not out[k - 1].get("tool_calls"):
            out[k - 1]["tool_calls"] = calls
    return out


def summary(turns: list[dict] | None) -> dict:
    """The columns the filters read: conversation turns (the prompt counts as one, as in the engine's
    num_turns metric), the tools called (`|a|b|`: an exact name matches `|name|`), any tool error."""
    if turns is None:
        return {"num_turns": None, "tool_names": None, "tool_error": None}
    names: list[str] = []
    for t in turns:
        calls = t.get("tool_calls") or []
        found = [c.get("name") for c in calls if isinstance(c, dict)] if calls else []
        if t.get("role") == "tool" and t.get("tool"):
            found += [n.strip() for n in str(t["tool"]).split(",")]
        names += [n for n in found if n and n not in names]
    return {"num_turns": 1 + len(turns), "tool_names": "|" + "|".join(names) + "|" if names else None,
            "tool_error": any(t.get("role") == "tool" and t.get("error") for t in turns)}


def lift_from_extras(data: dict) -> dict:
    """Older dashboard loggers sent turns / loss_mask / num_turns inside `extras`: take them out (num_turns is
    derived from the turns), then normalize the turns."""
    extras = data.get("extras")
    if isinstance(extras, dict) and ("turns" in extras or "loss_mask" in extras):
        extras = dict(extras)
        for key in ("turns", "loss_mask"):
            if key in extras and data.get(key) is None:
                data[key] = extras.pop(key)
        if data.get("turns") is not None:
            extras.pop("num_turns", None)
        data["extras"] = extras
    if data.get("turns") is not None:
        data["turns"] = normalize_turns(data["turns"], data.get("tokens") if isinstance(data.get("tokens"), list)
                                        else None)
    mask, tokens = data.get("loss_mask"), data.get("tokens")
    if isinstance(mask, list) and isinstance(tokens, list) and len(mask) != len(tokens):
        raise ValueError(f"loss_mask: {len(mask)} values for {len(tokens)} tokens; one 0/1 per token")
    return data
