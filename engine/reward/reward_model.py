"""Scoring with a sequence-classification reward model (one logit per sequence)."""
from __future__ import annotations

from collections.abc import Sequence

import torch


class RewardModelScorer:
    """score = the model's logit at the last non-pad token of prompt_text + response_text.

    Sequences are right-padded; for decoder classifiers (a `score` head, e.g. Qwen2/Llama) the per-token
    logits are taken from the head directly so the pooled position does not depend on the pad token id
    (which often equals eos and may appear inside a response).
    """

    def __init__(self, path: str, device: str | torch.device = "cpu", micro_batch_size: int = 8,
                 max_length: int | None = None):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.device = torch.device(device)
        self.micro_batch_size = int(micro_batch_size)
        self.max_length = max_length
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.tokenizer.padding_side = "right"
        self.tokenizer.truncation_side = "left"  # the end of the response is what gets scored: keep it
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        config = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") \
            else self.model.config
        if config.pad_token_id is None:  # HF refuses batches > 1 without one; our pooling does not use it
            config.pad_token_id = self.tokenizer.pad_token_id
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model.to(self.device).eval()

    @torch.no_grad()
    def score_texts(self, texts: Sequence[str]) -> list[float]:
        out: list[float] = []
        head = getattr(self.model, "score", None)
        for start in range(0, len(texts), self.micro_batch_size):
            chunk = list(texts[start:start + self.micro_batch_size])
            enc = self.tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False,
                                 truncation=self.max_length is not None, max_length=self.max_length)
            input_ids = enc["input_ids"].to(self.device)
            attention_mask = enc["attention_mask"].to(self.device)
            last = attention_mask.sum(-1) - 1
            if isinstance(head, torch.nn.Module):
                captured = {}
                hook = head.register_forward_hook(lambda m, i, o, store=captured: store.__setitem__("logits", o))
                try:
                    self.model(input_ids=input_ids, attention_mask=attention_mask)
                finally:
                    hook.remove()
                logits = captured["logits"][torch.arange(len(chunk), device=self.device), last, 0]
            else:  # encoder classifiers pool internally (e.g. [CLS])
                logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0]
            out.extend(float(x) for x in logits.float().cpu())
        return out

    def score(self, prompt_texts: Sequence[str], response_texts: Sequence[str]) -> list[float]:
        if len(prompt_texts) != len(response_texts):
            raise ValueError(f"{len(prompt_texts)} prompts but {len(response_texts)} responses")
        return self.score_texts([p + r for p, r in zip(prompt_texts, response_texts)])

    def __call__(self, batch, response_texts: Sequence[str]) -> list[float]:
        """Scores a Batch's meta `prompt_text` against the decoded responses (e.g. RewardResult.response_texts)."""
        return self.score(list(batch.meta["prompt_text"]), response_texts)
