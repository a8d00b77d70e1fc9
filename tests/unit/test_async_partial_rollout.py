"""Partial rollout on the async modes' behaviour policy (engine/workers/behaviour/policy.py), tiny random Qwen2,
fp32, CPU: a weight update forced mid-answer (published at a chunk boundary through the policy's `on_chunk` hook, so
no thread is raced) leaves the tokens before it with their old version and log-probs, and the tokens after it carry
the new version with the new weights' log-probs, each checked against a recompute by the actor with those weights."""
from __future__ import annotations

import copy

import pytest
import torch

from engine.config.schema import RolloutConfig
from engine.protocol import Batch
from engine.rollout.hf_rollout import HFRollout
from engine.rollout.versions import KEY
from engine.workers.behaviour.policy import BehaviourPolicy
from engine.workers.forward import response_log_probs
from tests.unit.test_static_decoder import model  # noqa: F401  (the tiny random Qwen2 in fp32, a fixture)

PAD = 151643
LENGTH, CHUNK = 10, 4


@pytest.fixture(scope="module")
def tokenizer():
    from engine.models.tokenizer import build_byte_tokenizer

    return build_byte_tokenizer()


def _prompts(rows=4, width=7) -> Batch:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 94, (rows, width), generator=g)
    mask = torch.ones(rows, width, dtype=torch.long)
    mask[0, :3] = 0  # a left-padded prompt: its positions start later
    ids[mask == 0] = PAD
    return Batch({"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)})


def _policy(actor, tokenizer):
    cfg = RolloutConfig(response_length=LENGTH, engine_kwargs={"hf": {"decode": "static"}})
    return BehaviourPolicy(actor, lambda: copy.deepcopy(actor).eval(),
                           lambda module: HFRollout(module, tokenizer, cfg, "cpu"))


def _update(actor, seed):
    """A stand-in for an optimizer step: every weight moves a little."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in actor.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)


def _recomputed(weights, out: Batch) -> torch.Tensor:
    with torch.no_grad():
        lp, _ = response_log_probs(weights, out, 1.0)
    return lp


def test_an_update_mid_answer_keeps_the_old_tokens_and_continues_on_the_new_weights(model, tokenizer):  # noqa: F811 (the imported fixture)
    actor = copy.deepcopy(model)
    policy = _policy(actor, tokenizer)
    policy.publish(0)
    old = copy.deepcopy(actor)
    seen = []

    def update_after_first_chunk(done):
        seen.append(done)
        if done == CHUNK:  # the trainer finishes its step while the first chunk was being generated
            _update(actor, seed=1)
            policy.publish(1)

    torch.manual_seed(3)
    out, metrics = policy.generate(_prompts(), 0, newest=1, chunk=CHUNK, on_chunk=update_after_first_chunk)
    mask = out["response_mask"].bool()
    assert mask[:, :CHUNK + 1].all(), "the answers must run past the update for the test to mean anything"
    assert seen[:2] == [CHUNK, 2 * CHUNK]  # checked between chunks
    assert metrics["rollout/partial_switches"] == 1 and policy.version == 1

    versions = out[KEY]
    assert (versions[:, :CHUNK] == 0).all()  # the tokens before the update keep their version ...
    assert (versions[:, CHUNK:][mask[:, CHUNK:]] == 1).all()  # ... and the ones after carry the new one

    behaviour = out["rollout_log_probs"]
    before, after = mask.clone(), mask.clone()
    before[:, CHUNK:], after[:, :CHUNK] = False, False
    by_old, by_new = _recomputed(old, out), _recomputed(actor, out)
    # each token's log-prob is the weights' that sampled it, on the whole prefix (the KV cache is recomputed)
    assert (behaviour - by_old)[before].abs().max() < 1e-5
    assert (behaviour - by_new)[after].abs().max() < 1e-5
    # and the two policies really differ on those tokens (the check above could not pass by accident)
    assert (behaviour - by_old)[after].abs().max() > 1e-3


def test_without_a_newer_version_or_past_the_allowed_one_the_answer_stays_on_its_version(model, tokenizer):  # noqa: F811 (the imported fixture)
    actor = copy.deepcopy(model)
    policy = _policy(actor, tokenizer)
    policy.publish(0)

    def publish_too_new(done):
        if done == CHUNK:  # a version the trainer of this batch does not allow (newer than its own weights)
            _update(actor, seed=2)
            policy.publish(2)

    torch.manual_seed(4)
    out, metrics = policy.generate(_prompts(), 0, newest=1, chunk=CHUNK, on_chunk=publish_too_new)
    mask = out["response_mask"].bool()
    assert metrics["rollout/partial_switches"] == 0 and policy.version == 0
    assert (out[KEY][mask] == 0).all()
    assert (out["rollout_log_probs"] - _recomputed(model, out))[mask].abs().max() < 1e-5  # chunked = one policy


def test_an_answer_that_ends_in_a_chunk_stops_there(model, tokenizer):  # noqa: F811 (the imported fixture)
    """A row that produced its end token is not continued (its tokens after the end are padding) while the rows
    still running go on, their log-probs still the policy's on the whole prefix."""
    actor = copy.deepcopy(model)
    policy = _policy(actor, tokenizer)
    eos = model.generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    with torch.no_grad():  # a much larger end-token row (tied embeddings: its input too): some answers end early
        actor.lm_head.weight[eos] *= 80
    policy.publish(0)
    torch.manual_seed(5)
    out, _ = policy.generate(_prompts(rows=6), 0, newest=0, chunk=3)
    mask = out["response_mask"].bool()
    ends = mask.sum(-1)
    assert (ends < LENGTH).any() and (ends == LENGTH).any()  # some ended inside a chunk, some ran to the end
    last = out["responses"].gather(1, (ends - 1)[:, None]).squeeze(1)
    assert ((ends == LENGTH) | (last == eos)).all()  # an answer stops at its end token
    assert (out["responses"][~mask] == PAD).all()
    assert (out["rollout_log_probs"] - _recomputed(actor, out))[mask].abs().max() < 1e-5
