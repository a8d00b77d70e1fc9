"""The rollout's front door (engine/rollout/registry.py): every name the schema accepts is a backend or an alias of
one, and what a backend does not support is refused by the config's check, naming the key."""
from __future__ import annotations

import typing

import pytest

from engine.config import ConfigError, build_config
from engine.config.schema import RolloutConfig
from engine.rollout import registry


def test_the_schema_accepts_exactly_the_registrys_names():
    assert set(typing.get_args(RolloutConfig.model_fields["name"].annotation)) == set(registry.NAMES)
    assert {registry.canonical(n) for n in registry.NAMES} == set(registry.BACKENDS)


def test_verls_old_name_resolves_to_the_hf_backend():
    cfg = build_config(["actor_rollout_ref.rollout.name=naive"])
    assert cfg.actor_rollout_ref.rollout.name == "hf" and registry.backend(cfg.actor_rollout_ref.rollout) is registry.HF


def test_vllm_at_tensor_parallel_2_is_refused_on_the_cpu_with_its_key():
    args = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"]
    with pytest.raises(ConfigError, match="not supported on the CPU") as err:
        build_config([*args, "trainer.device=cpu"])
    assert err.value.key == registry.TP_KEY
    gpus = ["trainer.n_gpus_per_node=2"]
    assert build_config([*args, *gpus, "trainer.device=cuda"]).actor_rollout_ref.rollout.name == "vllm"
    # trainer.device=auto: known only when the run starts, which checks again
    rollout = build_config([*args, *gpus]).actor_rollout_ref.rollout
    with pytest.raises(ConfigError, match="not supported on the CPU"):
        registry.check_device(rollout, "cpu")
    registry.check_device(rollout, "cuda")


def test_multi_turn_with_vllm_at_tensor_parallel_2_is_refused_with_its_key():
    with pytest.raises(ConfigError, match="works with actor_rollout_ref.rollout.tensor_model_parallel_size=1") as err:
        build_config(["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
                      "actor_rollout_ref.rollout.multi_turn.enable=True", "trainer.device=cuda",
                      "trainer.n_gpus_per_node=2"])
    assert err.value.key == registry.TP_KEY


def test_the_async_modes_refuse_vllm_with_the_registrys_reason():
    with pytest.raises(ConfigError, match="vLLM's async engine is not wired in") as err:
        build_config(["actor_rollout_ref.rollout.name=vllm", "trainer.use_v1=True",
                      "trainer.v1.trainer_mode=colocate_async"])
    assert err.value.key == "trainer.v1.trainer_mode" and "rollout.name=hf" in str(err.value)


def test_what_each_backend_says_it_does():
    hf, vllm = registry.HF, registry.VLLM
    assert hf.async_modes is None and vllm.async_modes  # a reason
    assert vllm.own_weights and not hf.own_weights and vllm.own_memory and not hf.own_memory
    assert hf.decode_choice and not vllm.decode_choice
    assert all(b.lora and b.multi_turn and b.cpu for b in (hf, vllm))
