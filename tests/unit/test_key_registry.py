"""No key is accepted and ignored: every schema key is read by the engine (checked in the module that
engine/config/registry.py names) or refused with a reason. A new key in neither fails here: register it in
engine/config/registry.py (READ_BY: the module that reads it; REFUSED: the values allowed and why)."""
import ast
import fnmatch
from functools import cache
from pathlib import Path

import pytest

from engine.config import ConfigError, PPOConfig, all_keys, build_config
from engine.config.registry import DEFAULT, READ_BY, REFUSED, refusal_of
from engine.config.verl_layout import canonical_key

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]


@cache
def attributes_read(module: str) -> frozenset[str]:
    """Names the module reads as attributes (`cfg.x`) or as keys of a config dict (`trainer.get("x")`)."""
    tree = ast.parse((ROOT / module).read_text())
    return frozenset([node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)]
                     + [node.value for node in ast.walk(tree)
                        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier()])


def reader_of(key: str) -> str | None:
    return next((module for pattern, module in READ_BY.items() if fnmatch.fnmatchcase(key, pattern)), None)


def test_every_key_is_read_or_refused():
    missing = [k for k in all_keys() if reader_of(k) is None and refusal_of(k) is None]
    assert not missing, ("keys neither read nor refused; add each to engine/config/registry.py (READ_BY: the "
                         f"module that reads it, or REFUSED: the values allowed and why): {missing}")


@pytest.mark.parametrize("key", [k for k in all_keys() if reader_of(k)])
def test_the_named_module_reads_the_key(key):
    module = reader_of(key)
    assert (ROOT / module).exists(), f"{key}: {module} does not exist"
    leaf = key.split(".")[-1]
    assert leaf in attributes_read(module), f"{key}: {module} never reads .{leaf}"


def test_every_registry_entry_matches_a_key():
    keys = all_keys()
    for pattern in [*READ_BY, *REFUSED]:
        assert any(fnmatch.fnmatchcase(k, pattern) for k in keys), f"registry entry {pattern!r} matches no key"


def _bad_value(key, refusal, default):
    if isinstance(default, bool):
        return not default
    if refusal.allowed == DEFAULT or not callable(refusal.allowed):
        allowed = [default] if refusal.allowed == DEFAULT else list(refusal.allowed)
        for candidate in (7, "other", ["model"], -2):
            if candidate not in allowed and not isinstance(default, bool):
                return candidate
    return ["model"]


@pytest.mark.parametrize("key", [k for k in all_keys() if refusal_of(k) and "strategy" not in k])
def test_refused_values_fail_with_the_key_named(key):
    refusal, node = refusal_of(key), PPOConfig()
    for part in key.split("."):
        node = getattr(node, part)
    bad = _bad_value(key, refusal, node)
    arg = f"{key}={bad}" if not isinstance(bad, list) else f"{key}=[{','.join(bad)}]"
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_config([*SMALL, arg])


def test_the_default_of_every_refused_key_is_accepted():
    build_config(SMALL)


@pytest.mark.parametrize("override, words", [
    ("algorithm.use_pf_ppo=True", "PF-PPO"),
    ("actor_rollout_ref.rollout.mode=async", "async"),
    ("+actor_rollout_ref.rollout.multi_turn.max_parallel_calls=2", "multi-turn"),
    ("actor_rollout_ref.rollout.multi_turn.use_inference_chat_template=True", "multi-turn"),
    ("actor_rollout_ref.actor.checkpoint.save_contents=[model]", "always holds model, optimizer and extra"),
    ("data.custom_cls.path=my.py", "custom dataset"),
    ("data.tool_config_path=tools.yaml", "multi-turn"),
    ("actor_rollout_ref.model.enable_activation_offload=True", "activation offload"),
    ("reward_model.launch_reward_fn_async=True", "synchronously"),
    ("trainer.default_hdfs_dir=hdfs://x", "HDFS"),
    ("trainer.max_critic_ckpt_to_keep=2", "max_actor_ckpt_to_keep"),
    ("actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params=100", "wrap"),
    ("actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:bf16}", "model_dtype"),
    ("actor_rollout_ref.actor.fsdp_config.fsdp_size=2", "HSDP"),
    ("actor_rollout_ref.model.use_liger=True", "Liger"),
    ("actor_rollout_ref.model.use_fused_kernels=True", "fused"),
    ("actor_rollout_ref.actor.fsdp_config.param_offload=True", "optimizer_offload"),
    ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2", "FSDP2 only"),
    ("actor_rollout_ref.actor.profiler.enable=True", "profile_steps"),
])
def test_issue_keys_are_refused_with_the_reason(override, words):
    key = canonical_key(override.split("=")[0].lstrip("+"))
    with pytest.raises(ConfigError) as err:
        build_config([*SMALL, override])
    assert key in str(err.value) and words in str(err.value)


def test_clip_grad_is_verl_09s_name_of_grad_clip():
    cfg = build_config([*SMALL, "actor_rollout_ref.actor.optim.clip_grad=0.5", "critic.optim.clip_grad=0.25"])
    assert cfg.actor_rollout_ref.actor.grad_clip == 0.5 and cfg.critic.grad_clip == 0.25
    with pytest.raises(ConfigError, match="two spellings"):
        build_config(["actor_rollout_ref.actor.optim.clip_grad=0.5", "actor_rollout_ref.actor.grad_clip=2.0"])


def test_offload_both_or_offload_policy_are_accepted():
    for args in (["actor_rollout_ref.actor.fsdp_config.param_offload=True",
                  "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True"],
                 ["actor_rollout_ref.actor.fsdp_config.offload_policy=True"],
                 ["actor_rollout_ref.ref.fsdp_config.param_offload=True"]):
        build_config([*SMALL, *args])
