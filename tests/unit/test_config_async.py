"""verl 0.9's asynchronous trainer keys (issue 29): each one resolves to what it says or is refused naming the key
and the fix (engine/config/trainer_mode.py)."""
from __future__ import annotations

import pytest

from engine.config import ConfigError, build_config

# separate_async's invariant holds: 8 = 4 × 2
ASYNC = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2", "data.train_batch_size=8",
         "actor_rollout_ref.actor.ppo_mini_batch_size=2", "trainer.v1.separate_async.parameter_sync_step=4"]


def test_verl_defaults_of_the_v1_keys():
    v1 = build_config([]).trainer.v1
    assert (v1.trainer_mode, v1.sampler.max_off_policy_threshold, v1.sampler.max_off_policy_strategy) == ("sync", 8, "drop")
    assert (v1.separate_async.parameter_sync_step, v1.separate_async.num_warmup_batches,
            v1.colocate_async.num_warmup_batches) == (4, 1, 1)


def test_the_separate_async_invariant_is_refused_by_name_with_the_value_that_fits():
    with pytest.raises(ConfigError) as err:
        build_config(ASYNC[:-1] + ["trainer.v1.trainer_mode=separate_async",
                                   "trainer.v1.separate_async.parameter_sync_step=3"])
    assert err.value.key == "trainer.v1.separate_async.parameter_sync_step"
    assert "8 != 3 × 2" in str(err.value) and "parameter_sync_step=4" in err.value.fix


def test_the_invariant_binds_separate_async_only():
    # colocate_async splits the whole batch into mini-batches on the worker, as sync does: no invariant
    cfg = build_config(ASYNC[:-1] + ["trainer.v1.trainer_mode=colocate_async",
                                     "trainer.v1.separate_async.parameter_sync_step=3"])
    assert cfg.trainer.v1.trainer_mode == "colocate_async"


@pytest.mark.parametrize("threshold", [0, -1])
def test_a_threshold_below_one_is_refused_naming_the_strict_value(threshold):
    with pytest.raises(ConfigError) as err:
        build_config([f"trainer.v1.sampler.max_off_policy_threshold={threshold}"])
    assert err.value.key == "trainer.v1.sampler.max_off_policy_threshold" and "Use 1" in err.value.fix


def test_an_unknown_strategy_names_the_choices():
    with pytest.raises(ConfigError, match="max_off_policy_strategy") as err:
        build_config(["trainer.v1.sampler.max_off_policy_strategy=skip"])
    assert "drop" in str(err.value) and "wait" in str(err.value)


@pytest.mark.parametrize("args, key, words", [
    (["actor_rollout_ref.rollout.nnodes=1"], "actor_rollout_ref.rollout.nnodes", "only in trainer.v1.trainer_mode"),
    (["actor_rollout_ref.rollout.nnodes=1", "trainer.v1.trainer_mode=separate_async"],
     "actor_rollout_ref.rollout.nnodes", "not built yet"),
    (["actor_rollout_ref.rollout.n_gpus_per_node=4"], "actor_rollout_ref.rollout.n_gpus_per_node", "nnodes > 0"),
])
def test_the_rollout_resource_split(args, key, words):
    with pytest.raises(ConfigError) as err:
        build_config(ASYNC + args)
    assert err.value.key == key and words in str(err.value)


def test_the_resource_split_at_its_defaults_resolves():
    cfg = build_config(["actor_rollout_ref.rollout.n_gpus_per_node=1"])  # = trainer.n_gpus_per_node
    assert cfg.actor_rollout_ref.rollout.nnodes == 0


@pytest.mark.parametrize("key", ["transfer_queue.enable", "transfer_queue.backend.storage_backend"])
def test_transfer_queue_keys_name_what_rlstudio_does_instead(key):
    with pytest.raises(ConfigError) as err:
        build_config([f"{key}=True"])
    assert err.value.key == key and "in-process queue" in str(err.value)


@pytest.mark.parametrize("key, words", [
    ("trainer.v1.separate_async.hybrid_rollout.enable_switch=True", "step switching"),
    ("trainer.v1.sampler.custom_sampler.path=x.py", "custom samplers"),
    ("trainer.v1.sync.foo=1", "no options"),
])
def test_v1_keys_without_a_meaning_here_are_refused_by_name(key, words):
    with pytest.raises(ConfigError) as err:
        build_config([key])
    assert err.value.key == key.split("=")[0] and words in str(err.value)


def test_sync_refill_failed_groups_is_accepted_and_async_modes_always_refill():
    from engine.trainer.failed_groups import refills_failed_groups

    assert refills_failed_groups(build_config([])) is False  # sync: the reward function's error fails the run
    cfg = build_config(["trainer.v1.sampler.sync_refill_failed_groups=True"])
    assert cfg.trainer.v1.sampler.sync_refill_failed_groups is True and refills_failed_groups(cfg) is True
    on = ASYNC + ["trainer.use_v1=True", "trainer.v1.trainer_mode=colocate_async"]
    assert refills_failed_groups(build_config(on)) is True  # the async modes always refill
    carry = build_config(on + ["trainer.v1.sampler.max_off_policy_threshold=3", "trainer.v1.carry_over_groups=1"])
    assert refills_failed_groups(carry) is False  # not built with carry-over: the error fails the run


def test_bypass_mode_resolves_and_refuses_what_it_makes_meaningless():
    cfg = build_config(ASYNC + ["algorithm.rollout_correction.bypass_mode=True"])
    assert cfg.algorithm.rollout_correction.bypass_mode is True
    with pytest.raises(ConfigError) as err:
        build_config(ASYNC + ["algorithm.rollout_correction.bypass_mode=True",
                              "algorithm.rollout_correction.rollout_is=token"])
    assert err.value.key == "algorithm.rollout_correction.bypass_mode" and "rollout_is=null" in err.value.fix


@pytest.mark.parametrize("args, words", [
    (["trainer.n_gpus_per_node=2", "reward_model.enable=True", "reward_model.model.path=rm",
      "algorithm.filter_groups.enable=True"], "reward model in the rollout thread"),
    (["actor_rollout_ref.rollout.name=vllm"], "static decoder"),
    (["+actor_rollout_ref.rollout.engine_kwargs.hf.decode=generate"], "behaviour log-prob"),
    (["actor_rollout_ref.model.lora_rank=8"], "LoRA"),
])
@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_what_the_async_driver_does_not_cover_yet_is_refused_naming_the_mode(mode, args, words):
    with pytest.raises(ConfigError) as err:
        build_config(ASYNC + [f"trainer.v1.trainer_mode={mode}"] + args)
    assert err.value.key == "trainer.v1.trainer_mode" and words in str(err.value) and err.value.fix


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_async_modes_run_on_several_workers(mode):
    """The behaviour copy is unsharded (engine/trainer/ASYNC.md): no worker count is refused, and a reward model
    runs beside them unless DAPO's filter would score with it in the rollout thread (refused above)."""
    for workers, args in ((2, []), (4, ["trainer.nnodes=2"]),
                          (2, ["reward_model.enable=True", "reward_model.model.path=rm"]),
                          (2, ["algorithm.filter_groups.enable=True"])):
        per_node = workers // (2 if args[:1] == ["trainer.nnodes=2"] else 1)
        cfg = build_config(ASYNC + [f"trainer.v1.trainer_mode={mode}", f"trainer.n_gpus_per_node={per_node}"] + args)
        assert (cfg.trainer.v1.trainer_mode, cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node) == (mode, workers)


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_async_modes_turn_token_tis_on_and_static_decode_unless_chosen(mode):
    cfg = build_config(ASYNC + [f"trainer.v1.trainer_mode={mode}"])
    rc = cfg.algorithm.rollout_correction
    assert rc.rollout_is == "token" and rc.rollout_is_threshold == 2.0  # verl's decoupled token TIS
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.hf["decode"] == "static"
    chosen = build_config(ASYNC + [f"trainer.v1.trainer_mode={mode}", "algorithm.rollout_correction.rollout_rs=token_k1",
                                   "algorithm.rollout_correction.rollout_rs_threshold=2"])
    assert chosen.algorithm.rollout_correction.rollout_is is None  # the user's choice stands
    bypass = build_config(ASYNC + [f"trainer.v1.trainer_mode={mode}", "algorithm.rollout_correction.bypass_mode=True"])
    assert bypass.algorithm.rollout_correction.rollout_is is None  # the old log-probs are the behaviour's


def test_a_resolved_async_config_resolves_again_unchanged():
    cfg = build_config(ASYNC + ["trainer.v1.trainer_mode=colocate_async"])
    again = build_config(base=cfg.model_dump())
    assert again.model_dump() == cfg.model_dump()


def test_the_legacy_trainer_ignores_v1_as_verl_does():
    cfg = build_config(ASYNC + ["trainer.use_v1=False", "trainer.v1.trainer_mode=colocate_async"])
    assert cfg.algorithm.rollout_correction.rollout_is is None  # synchronous: nothing turned on


def test_partial_rollout_is_off_by_default_and_runs_in_the_async_modes_only():
    v1 = build_config([]).trainer.v1
    assert (v1.partial_rollout, v1.partial_rollout_chunk) == (False, 16)
    cfg = build_config(ASYNC + ["trainer.use_v1=True", "trainer.v1.trainer_mode=colocate_async",
                                "trainer.v1.partial_rollout=True", "trainer.v1.partial_rollout_chunk=8"])
    assert cfg.trainer.v1.partial_rollout and cfg.trainer.v1.partial_rollout_chunk == 8
    with pytest.raises(ConfigError) as err:  # the sync trainer never updates mid-batch
        build_config(ASYNC + ["trainer.v1.partial_rollout=True"])
    assert err.value.key == "trainer.v1.partial_rollout" and "colocate_async" in err.value.fix
    with pytest.raises(ConfigError) as err:  # min_new_tokens would be forced on every chunk
        build_config(ASYNC + ["trainer.use_v1=True", "trainer.v1.trainer_mode=colocate_async",
                              "trainer.v1.partial_rollout=True", "actor_rollout_ref.rollout.min_new_tokens=4"])
    assert err.value.key == "trainer.v1.partial_rollout" and "min_new_tokens=0" in err.value.fix


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_dapos_filter_runs_in_the_async_modes(mode):
    """The rollout thread scores, filters and refills each batch (engine/trainer/ASYNC.md, "DAPO's filter")."""
    cfg = build_config(ASYNC + [f"trainer.v1.trainer_mode={mode}", "algorithm.filter_groups.enable=True",
                                "algorithm.filter_groups.metric=acc", "algorithm.filter_groups.max_num_gen_batches=3"])
    fg = cfg.algorithm.filter_groups
    assert (cfg.trainer.v1.trainer_mode, fg.enable, fg.metric, fg.max_num_gen_batches) == (mode, True, "acc", 3)


def test_carry_over_is_off_by_default_and_refused_where_it_cannot_carry():
    """trainer.v1.carry_over_groups (engine/trainer/ASYNC.md, "Carry-over"): async modes only, at most a batch, a
    threshold that lets a group be carried at least once, and not yet with DAPO's filter or partial rollout."""
    assert build_config([]).trainer.v1.carry_over_groups == 0
    on = ASYNC + ["trainer.use_v1=True", "trainer.v1.trainer_mode=colocate_async", "trainer.v1.carry_over_groups=4"]
    cfg = build_config(on)  # verl's default threshold 8, one batch ahead: carried up to 6 steps
    assert cfg.trainer.v1.carry_over_groups == 4
    cases = [
        (ASYNC + ["trainer.v1.carry_over_groups=4"], "trainer.v1.carry_over_groups", "colocate_async"),
        (on[:-1] + ["trainer.v1.carry_over_groups=9"], "trainer.v1.carry_over_groups", "at most 8"),
        (on + ["trainer.v1.sampler.max_off_policy_threshold=2"], "trainer.v1.sampler.max_off_policy_threshold",
         "at least 3"),
        (on + ["algorithm.filter_groups.enable=True"], "trainer.v1.carry_over_groups", "filter_groups.enable=False"),
        (on + ["trainer.v1.partial_rollout=True"], "trainer.v1.carry_over_groups", "partial_rollout=False"),
    ]
    for args, key, fix in cases:
        with pytest.raises(ConfigError) as err:
            build_config(args)
        assert err.value.key == key and fix in err.value.fix, (args, err.value.key, err.value.fix)
    # with no run-ahead a threshold of 2 already carries once
    assert build_config(on + ["trainer.v1.sampler.max_off_policy_threshold=2",
                              "trainer.v1.colocate_async.num_warmup_batches=0"]).trainer.v1.carry_over_groups == 4
