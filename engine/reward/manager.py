"""RewardManager: decoded responses + meta -> one scalar reward per response, placed on its last token."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.protocol import Batch
from engine.reward.default import default_compute_score
from engine.reward.overlong import overlong_penalty


class RewardComputeError(RuntimeError):
    """The reward function failed or returned something unusable; the message says which and why."""


@dataclass
class RewardResult:
    token_level_scores: torch.Tensor          # [B, R] float32, the score on the last valid response token
    scores: list[float]                       # [B]
    extra: dict[str, list] = field(default_factory=dict)  # extra columns from dict-returning functions
    response_texts: list[str] = field(default_factory=list)
    # rows whose reward function raised or returned something unusable (score 0), with the error: only when the
    # manager marks failures instead of raising (RewardManager.mark_failures; failed groups are then refilled)
    failed: dict[int, str] = field(default_factory=dict)

    def select(self, rows: list[int]) -> RewardResult:
        new = {old: i for i, old in enumerate(rows)}
        return RewardResult(self.token_level_scores[rows], [self.scores[i] for i in rows],
                            {k: [v[i] for i in rows] for k, v in self.extra.items()},
                            [self.response_texts[i] for i in rows] if self.response_texts else [],
                            {new[row]: msg for row, msg in self.failed.items() if row in new})

    @staticmethod
    def concat(parts: list[RewardResult]) -> RewardResult:
        keys: list[str] = []
        for p in parts:
            keys.extend(k for k in p.extra if k not in keys)
        failed, offset = {}, 0
        for p in parts:
            failed.update({offset + row: msg for row, msg in p.failed.items()})
            offset += len(p.scores)
        return RewardResult(torch.cat([p.token_level_scores for p in parts]), [s for p in parts for s in p.scores],
                            {k: [x for p in parts for x in p.extra.get(k, [None] * len(p.scores))] for k in keys},
                            [t for p in parts for t in p.response_texts], failed)


def _fn_name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


class RewardManager:
    """Scores a batch with `compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)`.

    The batch holds tensors `responses` [B, R] (right-padded) and `response_mask` [B, R] and meta
    `data_source` (or the `reward_fn_key` column), `ground_truth`, `extra_info`.

    A reward function that raises (or returns something unusable) raises RewardComputeError, unless `mark_failures`
    is set (the trainer sets it where failed groups are evicted and refilled): the row then scores 0 and its error
    is recorded in RewardResult.failed.
    """

    def __init__(self, tokenizer, compute_score: Callable | None = None, reward_fn_key: str = "data_source",
                 reward_kwargs: dict | None = None, overlong_buffer=None, max_resp_len: int | None = None):
        """`overlong_buffer` (verl's `dapo` manager: enable, len, penalty_factor, log) adds DAPO's length penalty
        near `max_resp_len`; the score before it is kept as the `acc` column, as verl does."""
        self.tokenizer = tokenizer
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        self.reward_kwargs = dict(reward_kwargs or {})
        self.overlong = overlong_buffer if overlong_buffer is not None and overlong_buffer.enable else None
        self.max_resp_len = max_resp_len
        self.mark_failures = False
        if self.overlong is not None and (max_resp_len is None or not 0 < self.overlong.len <= max_resp_len):
            raise ValueError(f"overlong_buffer_cfg.len={self.overlong.len} must be > 0 and at most max_resp_len="
                             f"{max_resp_len}")

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
        failed: dict[int, str] = {}
        for i in range(n):
            try:
                score, row_extra = self._row(sources[i], texts[i], truths[i], infos[i])
            except RewardComputeError as e:
                if not self.mark_failures:
                    raise
                score, row_extra, failed[i] = 0.0, {}, str(e)
            scores.append(score)
            rows_extra.append(row_extra)

        keys: list[str] = []
        for row in rows_extra:  # first-seen order; rows lacking a key get None
            keys.extend(k for k in row if k not in keys)
        extra = {k: [row.get(k) for row in rows_extra] for k in keys}

        if self.overlong is not None:
            cfg = self.overlong
            if "acc" not in extra:
                extra["acc"] = list(scores)
            penalties = [overlong_penalty(int(length), self.max_resp_len, cfg.len, cfg.penalty_factor)
                         for length in lengths]
            scores = [s + p for s, p in zip(scores, penalties)]
            if cfg.log:
                extra["overlong_reward"] = penalties
                extra["overlong"] = [float(p < 0) for p in penalties]  # mean: the share cut back

        if "tool_reward" in batch.meta:  # multi-turn rollouts: rewards the tools gave (engine/tools/base.py)
            tool_rewards = [float(r or 0.0) for r in batch.meta["tool_reward"]]
            scores = [s + r for s, r in zip(scores, tool_rewards)]
            extra["tool_reward"] = tool_rewards

        token_level_scores = torch.zeros((n, width), dtype=torch.float32)
        for i, (length, s) in enumerate(zip(lengths, scores)):
            # An empty response has no last token; position 0 keeps its reward in the row sum.
            token_level_scores[i, max(int(length) - 1, 0)] = s
        return RewardResult(token_level_scores, scores, extra, texts, failed)

    def _row(self, data_source, text: str, ground_truth, extra_info) -> tuple[float, dict[str, Any]]:
        """One answer's score and extra columns; RewardComputeError when the function fails or returns junk."""
        result = self._score_one(data_source, text, ground_truth, extra_info)
        row_extra: dict[str, Any] = {}
        if isinstance(result, dict):
            if "score" not in result:
                raise RewardComputeError(f"reward function {_fn_name(self.compute_score)} returned a dict without "
                                         f"a 'score' key (keys: {sorted(result)}); put the reward under 'score'")
            row_extra = {k: v for k, v in result.items() if k != "score"}
            result = result["score"]
        try:
            return float(result), row_extra
        except (TypeError, ValueError):
            raise RewardComputeError(f"reward function {_fn_name(self.compute_score)} returned {result!r} "
                                     f"for data_source={data_source!r}; expected a number") from None

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
