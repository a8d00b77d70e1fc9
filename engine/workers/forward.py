"""Forward passes shared by the actor, the reference and the critic: log-probs of the response tokens
(and their entropy) or values, computed micro-batch by micro-batch.

Sequences are laid out as [left-padded prompt | right-padded response]; the logits that predict the
response tokens are the R positions before the last one, so the LM head only runs on those
(`logits_to_keep`), which spares the full-vocabulary logits of the prompt.
"""
from __future__ import annotations

import torch

from engine.algos.logprob import entropy_from_logits, logprobs_from_logits
from engine.protocol import Batch

MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids")


def response_logits(model, mb: Batch, temperature: float = 1.0) -> torch.Tensor:
    resp_len = mb["responses"].shape[1]
    out = model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"], position_ids=mb["position_ids"],
                use_cache=False, logits_to_keep=resp_len + 1)
    logits = out.logits[:, :-1, :]
    if temperature and temperature != 1.0:  # score under the distribution that was sampled from
        logits = logits / temperature
    return logits


def response_log_probs(model, mb: Batch, temperature: float, calc_entropy: bool = False):
    logits = response_logits(model, mb, temperature)
    log_probs = logprobs_from_logits(logits, mb["responses"])
    entropy = entropy_from_logits(logits) if calc_entropy else None
    return log_probs, entropy


def response_values(model, mb: Batch) -> torch.Tensor:
    """Critic values at the positions that predict each response token (value of the state before it)."""
    resp_len = mb["responses"].shape[1]
    out = model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"], position_ids=mb["position_ids"],
                use_cache=False)
    values = out.logits[:, -resp_len - 1:-1, 0].float()
    return values * mb["response_mask"]


@torch.no_grad()
def batched_log_probs(model, batch: Batch, micro: int, temperature: float, calc_entropy: bool = False):
    lps, ents = [], []
    for mb in batch.select(MODEL_INPUTS + ("responses",), meta_keys=()).split(micro):
        lp, ent = response_log_probs(model, mb, temperature, calc_entropy)
        lps.append(lp)
        if ent is not None:
            ents.append(ent)
    return torch.cat(lps), (torch.cat(ents) if ents else None)


@torch.no_grad()
def batched_values(model, batch: Batch, micro: int) -> torch.Tensor:
    return torch.cat([response_values(model, mb)
                      for mb in batch.select(MODEL_INPUTS + ("responses", "response_mask"), meta_keys=()).split(micro)])
