"""How a tool call looks in the model's text, and how a tool's answer is written back
(`actor_rollout_ref.rollout.multi_turn.format`).

- `hermes` (verl's default; Qwen2.5's format): the model ends its turn (end token) after one or more
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; the answers go back as `tool` messages rendered by
  the tokenizer's chat template, followed by the next assistant header.
- `compact` (for the built-in tiny model's character vocabulary): `<TAG>ARGS</TAG>` with the tool's `tag`
  (config `tag`, default its name; or the config's own `open` / `close` strings); the model's turn ends right after the closing tag, the answer is appended as
  `=RESULT\\n` and the model continues in the same turn: `<c>12*34</c>=408\\n408`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

FORMATS = ("hermes", "compact")


@dataclass
class Call:
    tool: str | None             # None: the call could not be read (error says why)
    arguments: Any
    error: str | None = None


class CompactFormat:
    name = "compact"

    def __init__(self, tools, tokenizer):
        # per tool: `<tag>ARGS</tag>`, or the tool config's own `open` / `close` strings (`close` must be non-empty)
        self.patterns = []
        for t in tools:
            opener, closer = str(t.config.get("open", f"<{t.tag}>")), str(t.config.get("close", f"</{t.tag}>"))
            if not closer:
                raise ValueError(f"tool {t.name}: config close must not be empty (it ends the model's turn)")
            self.patterns.append((t, re.compile(re.escape(opener) + "(.*?)" + re.escape(closer), re.DOTALL)))

    def _first(self, text: str):
        found = [(m.end(), m, t) for t, p in self.patterns if (m := p.search(text))]
        return min(found, key=lambda f: f[0]) if found else None

    def turn_end(self, text: str) -> int | None:
        """Where the model's turn stops early: right after the first complete call."""
        first = self._first(text)
        return first[0] if first else None

    def parse(self, text: str) -> list[Call]:
        first = self._first(text)
        if first is None:
            return []
        _, m, tool = first
        return [Call(tool.name, {tool.main_parameter: m.group(1)})]

    def render(self, answers: list[str], turn_text: str) -> str:
        return "".join(f"={a}\n" for a in answers)


class HermesFormat:
    name = "hermes"
    pattern = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)

    def __init__(self, tools, tokenizer):
        self.names = {t.name for t in tools}
        self.tokenizer = tokenizer

    def turn_end(self, text: str) -> int | None:
        return None  # the turn ends with the end token

    def parse(self, text: str) -> list[Call]:
        calls = []
        for m in self.pattern.finditer(text):
            try:
                obj = json.loads(m.group(1))
                name, arguments = obj["name"], obj.get("arguments", {})
                if isinstance(arguments, str):
                    arguments = json.loads(arguments)
                if not isinstance(arguments, dict):
                    raise ValueError("arguments must be an object")
            except (ValueError, KeyError, TypeError) as exc:
                calls.append(Call(None, m.group(1), f"could not read the tool call: {exc}"))
                continue
            if name not in self.names:
                calls.append(Call(None, arguments, f"unknown tool {name!r}; tools: {sorted(self.names)}"))
            else:
                calls.append(Call(name, arguments))
        return calls

    def render(self, answers: list[str], turn_text: str) -> str:
        """The chat template's text between the end of the model's turn and the next assistant header."""
        tok = self.tokenizer
        history = [{"role": "user", "content": "x"}, {"role": "assistant", "content": turn_text}]
        base = tok.apply_chat_template(history, tokenize=False)
        full = tok.apply_chat_template(history + [{"role": "tool", "content": a} for a in answers],
                                       tokenize=False, add_generation_prompt=True)
        if not full.startswith(base):
            raise ValueError("the chat template renders a conversation's prefix differently once tool messages "
                             "follow; use multi_turn.format=compact or a template that appends turns")
        eos = tok.eos_token or ""
        after_eos = base[base.rfind(eos) + len(eos):] if eos and eos in base else ""
        return after_eos + full[len(base):]


def make_format(name: str, tools, tokenizer):
    if name == "hermes":
        return HermesFormat(tools, tokenizer)
    if name == "compact":
        return CompactFormat(tools, tokenizer)
    raise ValueError(f"actor_rollout_ref.rollout.multi_turn.format={name!r}: use one of {list(FORMATS)}")
