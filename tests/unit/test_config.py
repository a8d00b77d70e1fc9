"""The run-config schema: overrides, validation messages, derived defaults and cross-field checks."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.config import ConfigError, build_config, json_schema, parse_overrides
from engine.config.loader import validate_tree


def test_overrides_follow_hydra_syntax():
    parsed = {o.key: (o.value, o.add) for o in parse_overrides([
        "actor_rollout_ref.actor.optim.lr=1e-6", "trainer.logger=['console']", "trainer.logger=[console,file]",
        "+trainer.extra_flag=3", "data.train_files=~/data/gsm8k/train.parquet", "data.val_files=null"])}
    assert parsed["actor_rollout_ref.actor.optim.lr"] == (1e-6, False)
    assert parsed["trainer.logger"] == (["console", "file"], False)
    assert parsed["trainer.extra_flag"] == (3, True)
    assert parsed["data.train_files"] == ("~/data/gsm8k/train.parquet", False)
    assert parsed["data.val_files"] == (None, False)


def test_unknown_key_suggests_closest():
    with pytest.raises(ConfigError) as err:
        build_config(["actor_rollout_ref.actor.optim.lrr=1e-6"])
    assert "actor_rollout_ref.actor.optim.lrr" in str(err.value)
    assert "actor_rollout_ref.actor.optim.lr" in str(err.value).split("Did you mean:")[1]


def test_short_key_finds_full_path():
    with pytest.raises(ConfigError, match="algorithm.kl_ctrl.kl_coef"):
        build_config(["kl_coef=0.1"])


def test_wrong_type_names_key_expected_and_value():
    with pytest.raises(ConfigError) as err:
        build_config(["trainer.total_epochs=many"])
    msg = str(err.value)
    assert "trainer.total_epochs" in msg and "integer" in msg and "'many'" in msg


def test_enum_lists_choices():
    with pytest.raises(ConfigError, match="gae.*grpo"):
        build_config(["algorithm.adv_estimator=ppo2"])


def test_plus_adds_keys_only_where_sections_accept_them():
    cfg = build_config(["+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4", "+trainer.note=x"])
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.vllm == {"swap_space": 4}
    assert cfg.trainer.model_extra["note"] == "x"
    with pytest.raises(ConfigError, match=r"Unknown config key 'trainer.note'.*\+trainer.note"):
        build_config(["trainer.note=x"])
    with pytest.raises(ConfigError, match="data.foo"):
        build_config(["+data.foo=1"])


def test_seed_command_defaults_turn_kl_in_reward_on_for_ppo():
    cfg = build_config(["algorithm.kl_ctrl.kl_coef=0.001", "actor_rollout_ref.rollout.name=naive",
                        "data.train_batch_size=256", "actor_rollout_ref.actor.ppo_mini_batch_size=64",
                        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"])
    assert cfg.algorithm.use_kl_in_reward is True
    assert cfg.critic.enable is True
    assert cfg.actor_rollout_ref.rollout.name == "hf"  # naive is an alias
    assert cfg.critic.ppo_mini_batch_size == 64 and cfg.critic.model.path == cfg.actor_rollout_ref.model.path
    grpo = build_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4",
                         "actor_rollout_ref.actor.use_kl_loss=True"])
    assert grpo.algorithm.use_kl_in_reward is False and grpo.critic.enable is False
    explicit = build_config(["algorithm.use_kl_in_reward=False"])
    assert explicit.algorithm.use_kl_in_reward is False


def test_batch_size_checks():
    with pytest.raises(ConfigError, match="multiple of"):
        build_config(["data.train_batch_size=10", "actor_rollout_ref.actor.ppo_mini_batch_size=4"])
    with pytest.raises(ConfigError, match="larger than data.train_batch_size"):
        build_config(["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=16"])
    with pytest.raises(ConfigError, match="workers"):
        build_config(["data.train_batch_size=6", "actor_rollout_ref.actor.ppo_mini_batch_size=6",
                      "trainer.n_gpus_per_node=4"])
    with pytest.raises(ConfigError, match="ppo_micro_batch_size_per_gpu"):
        build_config(["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"])
    cfg = build_config(["data.train_batch_size=24", "actor_rollout_ref.actor.ppo_mini_batch_size=24"])
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 12  # largest divisor of 24 that is <= 16


@pytest.mark.parametrize("override", ["actor_rollout_ref.model.lora_rank=8", "critic.model.lora_rank=4",
                                      "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
                                      "critic.ulysses_sequence_parallel_size=2"])
def test_unimplemented_verl_features_are_refused_by_name(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + ".*not supported"):
        build_config([override])
    build_config([key + ("=0" if "lora" in key else "=1")])  # the default stays accepted


def test_named_configs_validate():
    for name in ("demo", "demo_ppo", "calculator_multi_turn", "calculator_tool_use", "gsm8k_ppo_qwen2.5_0.5b", "gsm8k_grpo", "gsm8k_dapo",
                 "gsm8k_drgrpo", "gsm8k_gspo"):
        build_config([], config_name=name)
    demo = build_config(["trainer.total_training_steps=5"], config_name="demo")
    assert demo.trainer.total_training_steps == 5 and demo.algorithm.adv_estimator == "grpo"
    ppo = build_config([], config_name="demo_ppo")  # the seed's four roles: critic on, KL to the reference in the reward
    assert ppo.algorithm.adv_estimator == "gae" and ppo.critic.enable and ppo.algorithm.use_kl_in_reward
    assert ppo.actor_rollout_ref.rollout.n == 1 and ppo.algorithm.kl_ctrl.type == "adaptive"
    assert 0.01 <= ppo.algorithm.kl_ctrl.target_kl <= 0.1  # steered inside the seed's healthy reward-KL band
    with pytest.raises(ConfigError, match="Available: .*demo"):
        build_config([], config_name="nope")


@pytest.mark.parametrize("name", [None, "demo", "demo_ppo", "calculator_multi_turn", "calculator_tool_use", "gsm8k_ppo_qwen2.5_0.5b", "gsm8k_grpo", "gsm8k_dapo", "gsm8k_drgrpo",
                                  "gsm8k_gspo"])
def test_a_resolved_config_validates_again_unchanged(name):
    # the dashboard logger posts the resolved config to the server, which validates it again
    cfg = build_config(["actor_rollout_ref.model.path=/m", "data.train_files=/t.parquet"], config_name=name)
    again = validate_tree(json.loads(cfg.model_dump_json()))
    assert again.model_dump() == cfg.model_dump()


def test_json_schema_cli_prints_the_schema():
    out = subprocess.run([sys.executable, "-m", "engine.config", "--json-schema"], capture_output=True, text=True,
                         check=True).stdout
    schema = json.loads(out)
    assert schema == json.loads(json.dumps(json_schema()))
    actor = schema["$defs"]["ActorConfig"]["properties"]
    assert actor["ppo_mini_batch_size"]["x-essential"] is True
    assert schema["$defs"]["RolloutConfig"]["properties"]["name"]["enum"] == ["hf", "naive", "vllm"]


def test_misspelt_logger_is_refused_by_the_config_check():
    with pytest.raises(ConfigError, match="Did you mean 'tensorboard'"):
        build_config(["trainer.logger=[console,tensorbord]"])
    assert build_config(["trainer.logger=console"]).trainer.logger == ["console"]
