"""The reward model: one score per sequence from a classifier with one label, and the reward that adds it to
the rule/custom score.

`RewardModelScorer` runs on the workers (TrainWorker builds it, FSDP-sharded, on the worker's device: the trainer
calls it through `RewardModelRole`); tests run the same class directly on plain HF weights to check the scores.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from engine.reward.manager import RewardResult

TRUNCATION = ("right", "left", "error")  # reward_model.truncation; verl's default keeps the start ("right")


class RewardModelScorer:
    """score = the model's logit at the last non-pad token of prompt_text + response_text.

    verl's reward models are `AutoModelForTokenClassification` with num_labels=1 (the logit at the last token is
    taken); a `...ForSequenceClassification` checkpoint works too: its head's per-token logits are read directly, so
    the pooled position does not depend on the pad token id (which often equals eos and may sit inside a response).
    Rows are right-padded; longer than `max_length` tokens they are cut as `truncation` says: "right" keeps the
    first max_length tokens (verl's default), "left" the last, "error" refuses.
    """

    def __init__(self, path: str, device: str | torch.device = "cpu", micro_batch_size: int = 8,
                 max_length: int | None = None, truncation: str = "right",
                 wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None):
        """`wrap`: applied to the loaded model before use (the worker shards it with FSDP2 there)."""
        from transformers import (
            AutoConfig,
            AutoModelForSequenceClassification,
            AutoModelForTokenClassification,
            AutoTokenizer,
        )

        if truncation not in TRUNCATION:
            raise ValueError(f"reward_model.truncation={truncation!r}: use one of {', '.join(TRUNCATION)}")
        self.device = torch.device(device)
        self.micro_batch_size = int(micro_batch_size)
        self.max_length, self.truncation = max_length, truncation
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.tokenizer.padding_side = "right"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        config = AutoConfig.from_pretrained(path)
        arch = (config.architectures or [""])[0]
        self.per_token = not arch.endswith("ForSequenceClassification")
        config.num_labels = 1
        if self.per_token:
            config.classifier_dropout = 0.0
            model = AutoModelForTokenClassification.from_pretrained(path, config=config)
        else:
            if config.pad_token_id is None:  # HF refuses batches > 1 without one; our pooling does not use it
                config.pad_token_id = self.tokenizer.pad_token_id
            model = AutoModelForSequenceClassification.from_pretrained(path, config=config)
        model.requires_grad_(False)
        model.to(self.device).eval()
        self.model = wrap(model) if wrap is not None else model

    def encode(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        enc = self.tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=False)
        if self.max_length is not None and enc["input_ids"].shape[1] > self.max_length:
            if self.truncation == "error":
                longest = int(enc["attention_mask"].sum(-1).max())
                raise ValueError(f"a reward-model input has {longest} tokens, more than reward_model.max_length="
                                 f"{self.max_length}; raise it or set reward_model.truncation=right or left")
            self.tokenizer.truncation_side = self.truncation
            enc = self.tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=False,
                                 truncation=True, max_length=self.max_length)
        return {k: enc[k].to(self.device) for k in ("input_ids", "attention_mask")}

    @torch.no_grad()
    def score_texts(self, texts: Sequence[str]) -> list[float]:
        out: list[float] = []
        for start in range(0, len(texts), self.micro_batch_size):
            enc = self.encode(texts[start:start + self.micro_batch_size])
            rows = torch.arange(enc["input_ids"].shape[0], device=self.device)
            last = enc["attention_mask"].sum(-1) - 1
            if self.per_token:
                logits = self.model(**enc).logits[rows, last, 0]
            else:
                captured = {}
                hook = self.model.score.register_forward_hook(
                    lambda m, i, o, store=captured: store.__setitem__("logits", o))
                try:
                    self.model(**enc)
                finally:
                    hook.remove()
                logits = captured["logits"][rows, last, 0]
            out.extend(float(x) for x in logits.float().cpu())
        return out

    def score(self, prompt_texts: Sequence[str], response_texts: Sequence[str]) -> list[float]:
        if len(prompt_texts) != len(response_texts):
            raise ValueError(f"{len(prompt_texts)} prompts but {len(response_texts)} responses")
        return self.score_texts([p + r for p, r in zip(prompt_texts, response_texts)])

    def __call__(self, batch, response_texts: Sequence[str]) -> list[float]:
        """Scores a Batch's meta `prompt_text` against the decoded responses (e.g. RewardResult.response_texts)."""
        return self.score(list(batch.meta["prompt_text"]), response_texts)


class ModelReward:
    """The reward model's score (`rm_score`) added to the rule/custom score where a row has a ground truth.

    `score(prompt_texts, response_texts) -> list[float]` runs the reward model: in training, the trainer's
    `RewardModelRole` (the workers' sharded copy)."""

    def __init__(self, rule_reward, score: Callable[[list[str], list[str]], list[float]]):
        self.rule_reward, self.score = rule_reward, score

    @property
    def tokenizer(self):
        return self.rule_reward.tokenizer

    def __call__(self, batch):
        result = self.rule_reward(batch) if _has_rule(batch) else None
        texts = result.response_texts if result else self.rule_reward.tokenizer.batch_decode(
            batch["responses"], skip_special_tokens=True)
        rm_scores = [float(r) for r in self.score(list(batch["prompt_text"]), texts)]
        mask = batch["response_mask"]
        last = (mask.sum(-1) - 1).clamp(min=0)
        scores = torch.zeros(mask.shape, dtype=torch.float32)
        base = [0.0] * len(texts) if result is None else result.scores
        total = [b + r for b, r in zip(base, rm_scores)]
        scores[torch.arange(len(texts)), last] = torch.tensor(total, dtype=torch.float32)
        extra = dict(result.extra) if result else {}
        extra["rm_score"] = rm_scores
        return RewardResult(scores, total, extra, texts, dict(result.failed) if result else {})


def _has_rule(batch) -> bool:
    return "ground_truth" in batch and any(g is not None for g in batch["ground_truth"])
