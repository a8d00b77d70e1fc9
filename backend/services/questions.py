"""The question of a prompt, shared by the samples' rows and health's no-signal prompts (a module of its own so
that neither imports the other for it)."""
from __future__ import annotations

import re

# The question of a prompt: its last user turn without the chat template's tokens (Qwen's ChatML, the tiny model's
# compact `<|im_start|>Q:` form, Llama 3's); the prompt itself when it has no template. The same rules as the
# UI's frontend/src/lib/question.ts `questionOf` (keep the two in step).
_USER_START = re.compile(r"<\|im_start\|>(?:user\n|Q:)|<\|start_header_id\|>user<\|end_header_id\|>\n*")
_TURN_END = re.compile(r"<\|im_end\|>|<\|eot_id\|>|<\|im_start\|>|<\|start_header_id\|>|<\|endoftext\|>")
_HEADER = re.compile(r"<\|im_start\|>\w*(?:\n|:)?|<\|start_header_id\|>\w*<\|end_header_id\|>")
_SPECIAL = re.compile(r"<\|[a-z_]+\|>")
QUESTION_CHARS = 200


def question_of(prompt: str | None) -> str:
    raw = prompt or ""
    last = None
    for last in _USER_START.finditer(raw):
        pass
    if last is not None:
        rest = raw[last.end():]
        end = _TURN_END.search(rest)
        return (rest[:end.start()] if end else rest).strip()
    if not _SPECIAL.search(raw):
        return raw.strip()
    return " ".join(_SPECIAL.sub(" ", _HEADER.sub(" ", raw)).split())
