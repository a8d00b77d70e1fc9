"""Turning a step's batch into sample records for the loggers: one dict per rollout.

Fields: step, split, prompt_index, group_uid, prompt, response, score, reward, ground_truth,
data_source, and per-token arrays over the response's valid tokens: tokens, old_log_probs,
ref_log_probs, advantages, values (each present when the step computed it). Multi-turn rollouts add `turns`
(role, token span [start, end), text, tool, arguments, error, latency per segment), `num_turns` and `loss_mask` (1 on
the model's tokens, 0 on tool tokens); their token arrays run over the whole trajectory. Extra reward outputs
(a custom reward function's dict keys) are added as further fields.
When the batch has `policy_versions` (the weights' version of each generated token), a sample carries them over
`tokens` and its trajectory's oldest/newest version and staleness, as verl's v1 trainer counts them for a step s
that trains on version s - 1: staleness = (s - 1) - newest, staleness_worst = (s - 1) - oldest.
"""
from __future__ import annotations

from typing import Any

import torch

from engine.protocol import Batch
from engine.rollout import versions

TOKEN_ARRAYS = {"old_log_probs": "old_log_probs", "ref_log_prob": "ref_log_probs", "advantages": "advantages",
                "values": "values", "entropys": "entropies", "rollout_log_probs": "rollout_log_probs"}


def _json_safe(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def token_strings(tokenizer, ids: list[int]) -> list[str]:
    """Each token as readable text (byte-level pieces like 'Ġthe' become ' the'). An id the tokenizer does
    not know — models pad their vocabulary beyond the tokenizer's — shows as '<id:N>', never as null."""
    out = []
    for token_id, piece in zip(ids, tokenizer.convert_ids_to_tokens(ids)):
        if piece is None:
            out.append(f"<id:{token_id}>")
            continue
        try:
            out.append(tokenizer.convert_tokens_to_string([piece]))
        except Exception:  # noqa: BLE001 - a piece the decoder cannot render alone
            out.append(piece)
    return out


def build_samples(batch: Batch, tokenizer, step: int, split: str, response_texts: list[str],
                  extra: dict[str, list] | None = None, token_level: bool = True) -> list[dict[str, Any]]:
    mask = batch["response_mask"].bool()
    responses = batch["responses"]
    # A multi-turn response has tool tokens (attended, not trained on) between the model's: the token arrays
    # cover everything up to the last attended token, and `loss_mask` says which tokens the loss saw.
    attended = batch["attention_mask"][:, -responses.shape[1]:].bool() if "attention_mask" in batch else mask
    multi_turn = "turns" in batch
    span = attended if multi_turn else mask
    positions = torch.arange(1, span.shape[1] + 1).expand_as(span)
    lengths = (positions * span.cpu()).max(dim=-1).values.tolist() if len(span) else []
    scores = batch["token_level_scores"].sum(-1).tolist()
    rewards = (batch["token_level_rewards"].sum(-1).tolist() if "token_level_rewards" in batch else scores)
    arrays = {out: batch[key] for key, out in TOKEN_ARRAYS.items() if key in batch.tensors} if token_level else {}
    policy = _policy_versions(batch, step) if versions.KEY in batch.tensors else None
    samples = []
    for i in range(len(batch)):
        n = int(lengths[i])
        record: dict[str, Any] = {
            "step": step,
            "split": split,
            "prompt_index": int(batch["prompt_index"][i]) if "prompt_index" in batch else i,
            "group_uid": str(batch["uid"][i]) if "uid" in batch else str(i),
            "prompt": batch["prompt_text"][i] if "prompt_text" in batch else "",
            "response": response_texts[i],
            "score": float(scores[i]),
            "reward": float(rewards[i]),
            "ground_truth": _json_safe(batch["ground_truth"][i]) if "ground_truth" in batch else None,
            "data_source": str(batch["data_source"][i]) if "data_source" in batch else "",
            "response_length": int(mask[i].sum()) if multi_turn else n,
        }
        if multi_turn:
            record["turns"] = _json_safe(batch["turns"][i])
            for turn in record["turns"]:  # each turn's text, decoded from its own tokens (as the model saw them)
                turn["text"] = tokenizer.decode(responses[i, turn["start"]:turn["end"]].tolist(),
                                                skip_special_tokens=False)
            record["num_turns"] = 1 + len(batch["turns"][i])
        if token_level:
            record["tokens"] = token_strings(tokenizer, responses[i, :n].tolist())
            for name, tensor in arrays.items():
                record[name] = [round(float(x), 5) for x in tensor[i, :n].tolist()]
            if multi_turn:
                record["loss_mask"] = [int(x) for x in mask[i, :n].tolist()]
            if policy is not None:
                record["policy_versions"] = [int(x) for x in batch[versions.KEY][i, :n].tolist()]
        if policy is not None:
            record.update({name: values[i] for name, values in policy.items()})
        for k, values in (extra or {}).items():
            record[k] = _json_safe(values[i])
        samples.append(record)
    return samples


def _policy_versions(batch: Batch, step: int) -> dict[str, list[int]]:
    """Per row: the trajectory's oldest and newest version and verl's staleness at `step` (ints)."""
    oldest, newest = versions.trajectory_versions(batch[versions.KEY], batch["response_mask"])
    oldest, newest = oldest.tolist(), newest.tolist()
    return {"policy_version_min": oldest, "policy_version_max": newest,
            "staleness": [step - 1 - v for v in newest], "staleness_worst": [step - 1 - v for v in oldest]}


def group_advantage_stats(batch: Batch) -> dict[str, float]:
    """How many GRPO groups carried no signal (all scores equal → zero advantage)."""
    if "uid" not in batch:
        return {}
    scores = batch["token_level_scores"].sum(-1)
    groups: dict[str, list[float]] = {}
    for uid, s in zip(batch["uid"], scores.tolist()):
        groups.setdefault(str(uid), []).append(s)
    multi = [g for g in groups.values() if len(g) > 1]
    if not multi:
        return {}
    degenerate = sum(1 for g in multi if max(g) - min(g) < 1e-8)
    return {"critic/degenerate_group_ratio": degenerate / len(multi),
            "critic/group_score_std": float(torch.tensor([torch.tensor(g).std().item() for g in multi]).mean())}
