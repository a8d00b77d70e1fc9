"""RewardManager: decoded responses + meta -> one scalar reward per response, placed on its last token."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.protocol import Batch
from engine.reward.default import default_compute_score


class RewardComputeError(RuntimeError):
    """The reward function failed or returned something unusable; the message says which and why."""


@dataclass
class RewardResult:
    token_level_scores: torch.Tensor          # [B, R] float32, the score on the last valid response token
    scores: list[float]                       # [B]
    extra: dict[str, list] = field(default_factory=dict)  # extra columns from dict-returning functions
    response_texts: list[str] = field(default_factory=list)


def _fn_name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


class RewardManager:
    """Scores a batch with `compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)`.

    The batch holds tensors `responses` [B, R] (right-padded) and `response_mask` [B, R] and meta
    `data_source` (or the `reward_fn_key` column), `ground_truth`, `extra_info`.
    """

    def __init__(self, tokenizer, compute_score: Callable | None = None, reward_fn_key: str = "data_source",
                 reward_kwargs: dict | None = None):
        self.tokenizer = tokenizer
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        self.reward_kwargs = dict(reward_kwargs or {})

    @staticmethod
    def _valid_lengths(batch: Batch) -> torch.Tensor:
        responses = batch.tensors["responses"]
        if "response_mask" in batch.tensors:
            mask = batch.tensors["response_mask"]
        elif "attention_mask" in batch.tensors:  # prompt+response mask: its last R columns cover the response
            mask = batch.tensors["attention_mask"][:, -responses.shape[1]:]
        else:
            raise KeyError("reward needs tensor 'response_mask' (or 'attention_mask') next to 'responses'")
        mask = mask.to("cpu").bool()
        positions = torch.arange(1, mask.shape[1] + 1).expand_as(mask)
        # Up to the last valid token, so masked-out middle tokens (e.g. tool output) stay in the text.
        return (positions * mask).max(dim=-1).values

    def _meta(self, batch: Batch, key: str, n: int) -> list:
        return list(batch.meta[key]) if key in batch.meta else [None] * n

    def __call__(self, batch: Batch) -> RewardResult:
        if "responses" not in batch.tensors:
            raise KeyError("reward needs tensor 'responses' [B, R] in the batch")
        responses = batch.tensors["responses"].to("cpu")
        n, width = responses.shape
        lengths = self._valid_lengths(batch).tolist()
        texts = self.tokenizer.batch_decode([responses[i, :lengths[i]].tolist() for i in range(n)],
                                            skip_special_tokens=True)
        sources = self._meta(batch, self.reward_fn_key, n)
        truths = self._meta(batch, "ground_truth", n)
        infos = self._meta(batch, "extra_info", n)

        scores: list[float] = []
        rows_extra: list[dict[str, Any]] = []
        for i in range(n):
            result = self._score_one(sources[i], texts[i], truths[i], infos[i])
            if isinstance(result, dict):
                if "score" not in result:
                    raise RewardComputeError(f"reward function {_fn_name(self.compute_score)} returned a dict without "
                                       f"a 'score' key (keys: {sorted(result)}); put the reward under 'score'")
                rows_extra.append({k: v for k, v in result.items() if k != "score"})
                result = result["score"]
            else:
                rows_extra.append({})
            try:
                scores.append(float(result))
            except (TypeError, ValueError):
                raise RewardComputeError(f"reward function {_fn_name(self.compute_score)} returned {result!r} "
                                   f"for data_source={sources[i]!r}; expected a number") from None

        keys: list[str] = []
        for row in rows_extra:  # first-seen order; rows lacking a key get None
            keys.extend(k for k in row if k not in keys)
        extra = {k: [row.get(k) for row in rows_extra] for k in keys}

        token_level_scores = torch.zeros((n, width), dtype=torch.float32)
        for i, (length, s) in enumerate(zip(lengths, scores)):
            # An empty response has no last token; position 0 keeps its reward in the row sum.
            token_level_scores[i, max(int(length) - 1, 0)] = s
        return RewardResult(token_level_scores, scores, extra, texts)

    def _score_one(self, data_source, text: str, ground_truth, extra_info):
        kwargs = dict(data_source=data_source, solution_str=text, ground_truth=ground_truth,
                      extra_info=extra_info, **self.reward_kwargs)
        if self.compute_score is default_compute_score:
            return self.compute_score(**kwargs)  # its own errors already say what to do
        try:
            return self.compute_score(**kwargs)
        except Exception as e:
            raise RewardComputeError(f"reward function {_fn_name(self.compute_score)} failed for data_source="
                               f"{data_source!r} ({type(e).__name__}: {e}); response starts: {text[:200]!r}") from e
