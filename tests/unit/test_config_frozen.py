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
