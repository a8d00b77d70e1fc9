"""The run-config schema: overrides, validation messages, derived defaults and cross-field checks."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.config import (CONFIG_DIR, ConfigError, build_config, config_from_argv, json_schema, load_resolved,
                           parse_overrides, save_resolved, uses_reference)
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


@pytest.mark.parametrize("override", ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
                                      "critic.ulysses_sequence_parallel_size=2"])
def test_unimplemented_verl_features_are_refused_by_name(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + ".*not supported"):
        build_config([override])
    build_config([key + "=1"])  # the default stays accepted


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


@pytest.mark.parametrize("overrides, key", [
    (["trainer.total_trainig_steps=2"], "trainer.total_trainig_steps"),  # unknown: the key as written
    (["trainer.total_epochs=many"], "trainer.total_epochs"),  # wrong type
    (["data.train_batch_size=10", "actor_rollout_ref.actor.ppo_mini_batch_size=4"], "data.train_batch_size"),
    (["trainer.logger=[console,tensorbord]"], "trainer.logger"),
    (["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=1"], "algorithm.adv_estimator"),
    (["critic.fsdp.param_offload=True", "critic.model.fsdp_config.param_offload=False"],  # two spellings of one key
     "critic.model.fsdp_config.param_offload"),
])
def test_a_config_error_carries_its_key(overrides, key):
    with pytest.raises(ConfigError) as err:
        build_config(overrides)
    assert err.value.key == key


def test_a_config_error_carries_its_fix_apart_and_in_its_text():
    with pytest.raises(ConfigError) as err:
        build_config(["actor_rollout_ref.actor.optim.lrr=1e-6"])
    exc = err.value
    assert exc.message == "Unknown config key 'actor_rollout_ref.actor.optim.lrr'."
    assert exc.fix.startswith("Did you mean: actor_rollout_ref.actor.optim.lr")
    assert str(exc) == f"{exc.message} {exc.fix}"


def test_a_resolved_config_file_is_read_as_it_is(tmp_path):
    cfg = build_config(["trainer.total_training_steps=3", "actor_rollout_ref.actor.optim.clip_grad=0.7"],
                       config_name="demo")
    path = save_resolved(cfg, tmp_path / "resolved.json")
    again = config_from_argv(["--config-file", str(path)])
    assert again.model_dump() == cfg.model_dump() and again.actor_rollout_ref.actor.grad_clip == 0.7
    # what `python -m engine.config` prints is such a file
    printed = subprocess.run([sys.executable, "-m", "engine.config", "--config-name", "demo",
                              "trainer.total_training_steps=3", "actor_rollout_ref.actor.optim.clip_grad=0.7"],
                             capture_output=True, text=True, check=True).stdout
    (tmp_path / "printed.json").write_text(printed)
    assert load_resolved(tmp_path / "printed.json").model_dump() == cfg.model_dump()


def test_a_config_file_refuses_what_it_cannot_take_as_it_is(tmp_path):
    path = save_resolved(build_config([]), tmp_path / "resolved.json")
    with pytest.raises(ConfigError, match="cannot be combined with: data.train_batch_size=8") as err:
        config_from_argv(["--config-file", str(path), "data.train_batch_size=8"])
    assert "Edit the file" in err.value.fix
    (tmp_path / "preset.json").write_text(json.dumps({"data": {"train_batch_size": 8}}))  # never resolved
    with pytest.raises(ConfigError, match="not a resolved config") as err:
        config_from_argv(["--config-file", str(tmp_path / "preset.json")])
    assert "python -m engine.config [--config-name NAME] [key=value ...] > FILE" in err.value.fix
    (tmp_path / "bad.json").write_text(json.dumps({**json.loads(path.read_text()), "nope": 1}))
    with pytest.raises(ConfigError) as err:
        config_from_argv(["--config-file", str(tmp_path / "bad.json")])
    assert err.value.key == "nope"
    with pytest.raises(ConfigError, match="no such file"):
        config_from_argv(["--config-file", str(tmp_path / "missing.json")])


def test_the_verl_command_line_stays_as_it_was():
    cfg = config_from_argv(["--config-name=demo", "-cp", str(CONFIG_DIR), "trainer.total_training_steps=4"])
    assert cfg == build_config(["trainer.total_training_steps=4"], config_name="demo")


def test_uses_reference_is_the_kl_terms():
    assert uses_reference(build_config([], config_name="demo_ppo"))  # KL in the reward
    assert not uses_reference(build_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
                                            "actor_rollout_ref.actor.use_kl_loss=False"]))
    assert uses_reference(build_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
                                        "actor_rollout_ref.actor.use_kl_loss=True"]))
