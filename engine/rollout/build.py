"""The worker's rollout, built from the registry's backend (registry.py): the single-turn backend on the actor's
module, inside the agent loop (agent_loop.py) when multi_turn.enable."""
from __future__ import annotations

import torch

from engine.rollout import registry
from engine.rollout.agent_loop import maybe_agent_loop
from engine.rollout.hf_rollout import HFRollout, eos_ids
from engine.rollout.vllm_rollout import VLLMRollout


def _hf(actor_module, tokenizer, cfg, device_type: str, rank: int, world: int):
    return HFRollout(actor_module, tokenizer, cfg.actor_rollout_ref.rollout, device_type)


def _vllm(actor_module, tokenizer, cfg, device_type: str, rank: int, world: int):
    arr = cfg.actor_rollout_ref
    return VLLMRollout(actor_module, tokenizer, arr.rollout, arr.model, device_type, rank=rank, world=world,
                       seed=cfg.trainer.seed, num_threads=torch.get_num_threads())


BUILDERS = {registry.HF: _hf, registry.VLLM: _vllm}


def build_rollout(cfg, actor_module, tokenizer, device_type: str, rank: int, world: int):
    """The rollout a worker generates with, on the actor's (sharded) module."""
    rollout_cfg = cfg.actor_rollout_ref.rollout
    inner = BUILDERS[registry.backend(rollout_cfg)](actor_module, tokenizer, cfg, device_type, rank, world)
    return maybe_agent_loop(inner, tokenizer, rollout_cfg, inner.pad_id,
                            getattr(inner, "eos", None) or eos_ids(actor_module, tokenizer))
