"""Multi-turn sample records made by the engine itself, without a model: the agent loop (compact format, the
built-in calculator config, the tiny model's tokenizer) around a rollout that replays scripted model turns,
then the trainer's sample builder (engine/trainer/samples.py). The tool calls, the calculator's answers and
errors, the token spans and the loss mask are all the engine's. For the backend and UI tests of trajectories.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

import engine
from engine.models.tokenizer import build_char_tokenizer
from engine.protocol import Batch
from engine.rollout.agent_loop import AgentLoopRollout
from engine.tools.registry import load_tools
from engine.trainer.samples import build_samples

CALCULATOR = str(Path(engine.__file__).parent / "tools" / "configs" / "calculator.yaml")
# prompt -> the model's turns: a call and the answer; a call the calculator refuses; no call at all
SCRIPTS = {"12*34=?": ["<c>12*34</c>", "408"], "7/0=?": ["<c>7/0</c>", "0"], "6*7=?": ["42"]}


class ScriptedRollout:
    """Answers each context with its prompt's next scripted turn and the end token."""

    def __init__(self, tokenizer):
        self.tok = tokenizer

    def generate(self, prompts: Batch, validate: bool = False, max_new_tokens: int | None = None) -> Batch:
        turns = []
        for ids, mask in zip(prompts["input_ids"], prompts["attention_mask"]):
            context = self.tok.decode(ids[mask.bool()].tolist())
            prompt = next(p for p in SCRIPTS if context.startswith(p))
            turns.append(self.tok.encode(SCRIPTS[prompt][context.count("</c>")], add_special_tokens=False)
                         + [self.tok.eos_token_id])
        width = max(len(t) for t in turns)
        responses = torch.full((len(turns), width), self.tok.pad_token_id)
        mask = torch.zeros((len(turns), width), dtype=torch.long)
        for r, t in enumerate(turns):
            responses[r, :len(t)] = torch.tensor(t)
            mask[r, :len(t)] = 1
        return Batch({"responses": responses, "response_mask": mask})


def multi_turn_samples(step: int = 1, split: str = "train") -> list[dict]:
    """One record per script (the order of SCRIPTS), as the engine's loggers get them."""
    tok = build_char_tokenizer()
    cfg = SimpleNamespace(response_length=48, calculate_log_probs=False, multi_turn=SimpleNamespace(
        format="compact", max_assistant_turns=4, max_user_turns=None, max_tool_response_length=64))
    loop = AgentLoopRollout(ScriptedRollout(tok), tok, cfg, load_tools(CALCULATOR), tok.pad_token_id,
                            [tok.eos_token_id])
    texts = list(SCRIPTS)
    encoded = [tok.encode(t, add_special_tokens=False) for t in texts]
    width = max(len(e) for e in encoded)
    input_ids = torch.full((len(texts), width), tok.pad_token_id)
    attention = torch.zeros((len(texts), width), dtype=torch.long)
    for r, e in enumerate(encoded):
        input_ids[r, width - len(e):] = torch.tensor(e)
        attention[r, width - len(e):] = 1
    prompts = Batch({"input_ids": input_ids, "attention_mask": attention,
                     "position_ids": (attention.cumsum(-1) - 1).clamp(min=0)},
                    {"prompt_text": texts, "prompt_index": list(range(len(texts))), "uid": texts,
                     "ground_truth": ["408", "0", "42"], "data_source": ["arith"] * len(texts)})
    out = loop.generate(prompts)
    mask = out["response_mask"].float()
    out["token_level_scores"] = torch.zeros_like(mask)
    out["old_log_probs"] = -0.25 * mask
    out["advantages"] = 0.5 * mask
    responses = [tok.decode(row[a.bool()].tolist(), skip_special_tokens=True)
                 for row, a in zip(out["responses"], out["attention_mask"][:, -out["responses"].shape[1]:])]
    return build_samples(out, tok, step, split, responses)
