"""The recipe keys (DAPO, GSPO, rollout correction, Dr.GRPO): verl's spellings are accepted, resolved and, when they
cannot work together, refused with a message that names the key."""
from __future__ import annotations

import pytest

from engine.config import ConfigError, build_config, json_schema

GRPO = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "data.max_response_length=64"]


def test_dapo_keys_resolve():
    cfg = build_config(GRPO + [
        "algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=acc",
        "algorithm.filter_groups.max_num_gen_batches=10", "reward_model.reward_manager=dapo",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.len=16",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
        "actor_rollout_ref.actor.clip_ratio_low=0.2", "actor_rollout_ref.actor.clip_ratio_high=0.28"])
    assert cfg.algorithm.filter_groups.metric == "acc"
    assert cfg.reward_model.reward_kwargs.max_resp_len == 64  # from data.max_response_length
    assert cfg.reward_model.reward_kwargs.overlong_buffer_cfg.len == 16


def test_dapo_in_verl_0_9_spelling():
    """As verl 0.9's DAPO scripts write it (reward.reward_manager.name, +reward.reward_kwargs.*)."""
    cfg = build_config(GRPO + ["reward.reward_manager.name=dapo",
                               "+reward.reward_kwargs.overlong_buffer_cfg.enable=True",
                               "+reward.reward_kwargs.overlong_buffer_cfg.len=16",
                               "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5",
                               "+reward.reward_kwargs.overlong_buffer_cfg.log=False",
                               "+reward.reward_kwargs.max_resp_len=64"])
    rk = cfg.reward_model.reward_kwargs
    assert cfg.reward_model.reward_manager == "dapo"
    assert (rk.overlong_buffer_cfg.enable, rk.overlong_buffer_cfg.len, rk.max_resp_len) == (True, 16, 64)
    assert rk.overlong_buffer_cfg.penalty_factor == 0.5
    assert cfg.custom_reward_function.reward_kwargs == {}


@pytest.mark.parametrize("overrides, match", [
    (["algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=null"], "filter_groups.metric"),
    (["+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
      "+reward_model.reward_kwargs.overlong_buffer_cfg.len=8"], "reward_manager=dapo"),
    (["reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
      "+reward_model.reward_kwargs.overlong_buffer_cfg.len=100"], "overlong_buffer_cfg.len=100"),
    (["algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=two"],
     "rollout_is_threshold"),
    (["algorithm.rollout_correction.rollout_rs=token_k9", "algorithm.rollout_correction.rollout_rs_threshold=2"],
     "token_k9"),
    (["algorithm.rollout_correction.rollout_rs=token_k2"], "rollout_rs_threshold"),
    (["algorithm.rollout_correction.rollout_is=token", "+actor_rollout_ref.rollout.engine_kwargs.hf.decode=generate"],
     "decode=static"),
    (["algorithm.rollout_correction.bypass_mode=True", "+actor_rollout_ref.rollout.engine_kwargs.hf.decode=generate"],
     "bypass_mode"),
    (["actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov"], "loss_mode"),
])
def test_recipe_keys_refused_with_the_key_named(overrides, match):
    with pytest.raises(ConfigError, match=match):
        build_config(GRPO + overrides)


def test_gspo_and_rollout_correction_resolve():
    cfg = build_config(GRPO + ["actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
                               "algorithm.rollout_correction.rollout_is=sequence",
                               "algorithm.rollout_correction.rollout_is_threshold=0.5_2.0",
                               "algorithm.rollout_correction.rollout_rs=token_k1,seq_mean_k3",
                               "algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0,0.01",
                               "actor_rollout_ref.actor.loss_scale_factor=512"])
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "gspo"
    assert cfg.algorithm.rollout_correction.rollout_is_threshold == "0.5_2.0"
    assert cfg.critic.loss_scale_factor == 512  # the critic's divisor follows the actor's


def test_the_ui_form_gets_the_recipe_keys():
    props = json_schema()["$defs"]
    assert {"enable", "metric", "max_num_gen_batches"} <= set(props["FilterGroupsConfig"]["properties"])
    assert {"rollout_is", "rollout_is_threshold", "rollout_rs", "rollout_rs_threshold"} <= set(
        props["RolloutCorrectionConfig"]["properties"])
    assert "gspo" in str(props["PolicyLossConfig"]["properties"]["loss_mode"])
    assert {"enable", "len", "penalty_factor", "log"} <= set(props["OverlongBufferConfig"]["properties"])


def test_recipe_presets():
    dapo = build_config([], config_name="gsm8k_dapo")
    assert dapo.algorithm.filter_groups.enable and dapo.reward_model.reward_manager == "dapo"
    assert dapo.reward_model.reward_kwargs.max_resp_len == 512
    assert (dapo.actor_rollout_ref.actor.clip_ratio_high, dapo.actor_rollout_ref.actor.loss_agg_mode) == (
        0.28, "token-mean")
    dr = build_config([], config_name="gsm8k_drgrpo")
    assert not dr.algorithm.norm_adv_by_std_in_grpo
    assert dr.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-sum-norm"
    gspo = build_config([], config_name="gsm8k_gspo")
    assert gspo.actor_rollout_ref.actor.policy_loss.loss_mode == "gspo"
