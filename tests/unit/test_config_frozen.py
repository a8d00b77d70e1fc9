"""A resolved config is read-only (engine/config/frozen.py), and what a job decides at its start is its plan
(engine/config/plan.py): a copy changed and the difference recorded, the resolved config left as it was."""
from __future__ import annotations

import pickle

import pytest

from engine.config import build_config, load_resolved, save_resolved
from engine.config.frozen import ReadOnlyConfigError, editable_copy, is_frozen
from engine.config.plan import Plan


def test_resolve_and_load_resolved_hand_out_read_only_configs(tmp_path):
    cfg = build_config(["trainer.total_training_steps=3"])
    assert is_frozen(cfg)
    with pytest.raises(ReadOnlyConfigError, match="TrainerConfig.device: a resolved config is read-only"):
        cfg.trainer.device = "cpu"
    with pytest.raises(ReadOnlyConfigError):
        cfg.actor_rollout_ref.actor.optim.lr = 1.0
    loaded = load_resolved(save_resolved(cfg, tmp_path / "c.json"))
    assert is_frozen(loaded) and loaded == cfg
    assert is_frozen(pickle.loads(pickle.dumps(cfg)))  # as a Ray worker receives it


def test_lists_and_mappings_inside_a_resolved_config_are_read_only_too(tmp_path):
    """A free-form mapping (ray_init.runtime_env, rollout.engine_kwargs, +keys) and a list (trainer.logger) are
    frozen with the sections; to every reader they are still a dict and a list (JSON, YAML, pickling, ==)."""
    import yaml

    cfg = build_config(["+ray_init.runtime_env.env_vars.A=1", "trainer.logger=[console,file]"])
    env, logger = cfg.ray_init.runtime_env, cfg.trainer.logger
    for change in (lambda: env.__setitem__("B", 2), lambda: env["env_vars"].update(B="2"), lambda: env.pop("env_vars"),
                   lambda: logger.append("wandb"), lambda: logger.__setitem__(0, "x"), lambda: logger.sort()):
        with pytest.raises(ReadOnlyConfigError, match="read-only"):
            change()
    assert env == {"env_vars": {"A": "1"}} and logger == ["console", "file"]
    assert isinstance(env, dict) and isinstance(logger, list)
    dumped = cfg.model_dump()
    assert type(dumped["ray_init"]["runtime_env"]) is dict and yaml.safe_load(yaml.safe_dump(dumped)) == dumped
    received = pickle.loads(pickle.dumps(cfg))  # as a Ray worker receives it: still read-only
    with pytest.raises(ReadOnlyConfigError):
        received.trainer.logger.append("wandb")
    assert load_resolved(save_resolved(cfg, tmp_path / "c.json")) == cfg
    copy = editable_copy(cfg)
    copy.trainer.logger.append("wandb")
    copy.ray_init.runtime_env["env_vars"]["B"] = 2
    assert cfg.trainer.logger == ["console", "file"] and cfg.ray_init.runtime_env == {"env_vars": {"A": "1"}}


def test_an_editable_copy_changes_and_the_original_stays():
    cfg = build_config([])
    copy = editable_copy(cfg)
    copy.trainer.device = "cpu"
    assert copy.trainer.device == "cpu" and cfg.trainer.device == "auto"
    assert build_config([]).model_dump() == cfg.model_dump()


def test_a_plan_records_each_key_set_with_its_reason_and_leaves_the_resolved_config():
    cfg = build_config([])
    plan = Plan.start(cfg, "driver")
    plan.config.trainer.device = "cpu"
    plan.record("no GPU here")
    plan.config.actor_rollout_ref.actor.use_dynamic_bsz = True
    plan.config.actor_rollout_ref.actor.ppo_max_token_len_per_gpu = 4096
    plan.record("sized from memory")
    plan.record("nothing new")  # no change since the last record: no entry
    assert plan.entries == [
        {"key": "trainer.device", "value": "cpu", "was": "auto", "why": "no GPU here", "by": "driver"},
        {"key": "actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "value": 4096,
         "was": cfg.actor_rollout_ref.actor.ppo_max_token_len_per_gpu, "why": "sized from memory", "by": "driver"},
        {"key": "actor_rollout_ref.actor.use_dynamic_bsz", "value": True, "was": False, "why": "sized from memory",
         "by": "driver"}]
    job = plan.done()
    assert is_frozen(job) and job.trainer.device == "cpu" and cfg.trainer.device == "auto"
