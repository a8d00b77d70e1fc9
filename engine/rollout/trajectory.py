"""One multi-turn trajectory as one token sequence: pure functions, no model, no tools.

A trajectory is a list of segments, in order: the model's turns (`assistant`: token ids exactly as sampled,
with their log-probs) and tool results (`tool`: token ids that are context, not policy output). Laid out in a
response row of width R:

    responses      = the segments' tokens, then pad
    response_mask  = 1 on assistant tokens, 0 on tool tokens and pad   -> loss, KL, advantages, entropy
    attention_mask = 1 on every segment token, 0 on pad                -> the model attends to tool results
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

ASSISTANT, TOOL = "assistant", "tool"


@dataclass
class Segment:
    role: str                                # ASSISTANT or TOOL
    token_ids: list[int]
    log_probs: list[float] | None = None     # assistant turns: the rollout's log-prob of each token
    tool: str | None = None                  # tool segments: which tool answered ...
    arguments: Any = None                    # ... with which arguments
    error: str | None = None                 # ... and whether it failed (the message the model got)
    latency_s: float | None = None
    reward: float = 0.0


@dataclass
class Trajectory:
    segments: list[Segment] = field(default_factory=list)

    @property
    def length(self) -> int:
        return sum(len(s.token_ids) for s in self.segments)

    def token_ids(self) -> list[int]:
        return [t for s in self.segments for t in s.token_ids]

    def context(self, prompt_ids: list[int]) -> list[int]:
        return list(prompt_ids) + self.token_ids()

    @property
    def assistant_turns(self) -> int:
        return sum(s.role == ASSISTANT for s in self.segments)

    @property
    def tool_turns(self) -> int:
        return sum(s.role == TOOL for s in self.segments)


def layout(trajectories: list[Trajectory], width: int, pad_id: int) -> dict[str, torch.Tensor]:
    """`responses`, `response_mask`, `response_attention` [B, width] and `rollout_log_probs` (0 where there is no
    log-prob: tool tokens, pad, or a turn without them). Segments past `width` are an error: the loop keeps the
    budget, so an overflow here is a bug, not something to cut silently."""
    rows = len(trajectories)
    responses = torch.full((rows, width), pad_id, dtype=torch.long)
    response_mask = torch.zeros((rows, width), dtype=torch.long)
    attention = torch.zeros((rows, width), dtype=torch.long)
    log_probs = torch.zeros((rows, width), dtype=torch.float32)
    for r, traj in enumerate(trajectories):
        if traj.length > width:
            raise ValueError(f"trajectory {r} has {traj.length} tokens, more than the response width {width}")
        pos = 0
        for seg in traj.segments:
            n = len(seg.token_ids)
            if not n:
                continue
            responses[r, pos:pos + n] = torch.tensor(seg.token_ids, dtype=torch.long)
            attention[r, pos:pos + n] = 1
            if seg.role == ASSISTANT:
                response_mask[r, pos:pos + n] = 1
                if seg.log_probs is not None:
                    log_probs[r, pos:pos + n] = torch.tensor(seg.log_probs[:n], dtype=torch.float32)
            pos += n
    return {"responses": responses, "response_mask": response_mask, "response_attention": attention,
            "rollout_log_probs": log_probs}


def turns_record(traj: Trajectory) -> list[dict[str, Any]]:
    """The turn structure for sample logs: role, token span [start, end) in the response, tool, arguments,
    error, latency."""
    out, pos = [], 0
    for seg in traj.segments:
        n = len(seg.token_ids)
        rec: dict[str, Any] = {"role": seg.role, "start": pos, "end": pos + n}
        if seg.role == TOOL:
            rec.update(tool=seg.tool, arguments=seg.arguments, error=seg.error,
                       latency_s=None if seg.latency_s is None else round(seg.latency_s, 4))
            if seg.reward:
                rec["reward"] = seg.reward
        out.append(rec)
        pos += n
    return out
