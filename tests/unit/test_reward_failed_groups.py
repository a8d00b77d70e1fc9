"""Failed groups (engine/trainer/failed_groups.py): the reward manager marks the rows whose reward function raised
instead of raising (only when asked), the marks follow select/concat, and the trainer's group selection evicts every
group with a failed row, refills exactly the missing groups and stores the evicted answers marked `dropped`."""
from __future__ import annotations

import pytest

from engine.reward import RewardManager
from engine.reward.manager import RewardComputeError, RewardResult
from engine.trainer.batches import select_groups
from engine.trainer.failed_groups import MAX_GEN_BATCHES, METRIC, rows_without_failures
from engine.trainer.roles import StepLog
from tests.unit.test_reward_manager import make_batch, tokenizer  # noqa: F401 - the shared tokenizer fixture


def picky(data_source, solution_str, ground_truth, extra_info=None):
    """Raises for an answer containing '9' (deterministic), returns junk for one containing '8'."""
    if "9" in solution_str:
        raise ValueError("nine is not allowed")
    if "8" in solution_str:
        return "eight"
    return float(solution_str.strip() == ground_truth)


def _manager(tok, mark: bool) -> RewardManager:
    manager = RewardManager(tok, picky)
    manager.mark_failures = mark
    return manager


def test_the_manager_raises_by_default_and_marks_when_asked(tokenizer):  # noqa: F811
    batch, _ = make_batch(tokenizer, ["72", "79", "5", "38"], ["x"] * 4, ["72", "79", "6", "38"])
    with pytest.raises(RewardComputeError, match="nine is not allowed"):
        _manager(tokenizer, mark=False)(batch)
    res = _manager(tokenizer, mark=True)(batch)
    assert res.scores == [1.0, 0.0, 0.0, 0.0]  # failed rows score 0
    assert sorted(res.failed) == [1, 3]
    assert "ValueError: nine is not allowed" in res.failed[1] and "'79'" in res.failed[1]
    assert "returned 'eight'" in res.failed[3] and "expected a number" in res.failed[3]
    assert res.token_level_scores.sum(-1).tolist() == [1.0, 0.0, 0.0, 0.0]


def test_failed_marks_follow_select_and_concat(tokenizer):  # noqa: F811
    batch, _ = make_batch(tokenizer, ["72", "79", "5", "38"], ["x"] * 4, ["72", "79", "6", "38"])
    res = _manager(tokenizer, mark=True)(batch)
    sub = res.select([3, 0, 1])
    assert sorted(sub.failed) == [0, 2] and sub.failed[0] == res.failed[3] and sub.failed[2] == res.failed[1]
    joined = RewardResult.concat([res.select([0, 2]), res.select([1, 3]), res])
    assert sorted(joined.failed) == [2, 3, 5, 7]
    assert joined.failed[2] == joined.failed[5] == res.failed[1]


def test_a_group_with_any_failed_row_is_failed():
    rows, failed = rows_without_failures({3: "boom"}, ["a", "a", "b", "b", "c", "c"])
    assert rows == [0, 1, 4, 5] and failed == {"b"}
    assert rows_without_failures({}, ["a", "a"]) == ([0, 1], set())


def _trainer(tok, *overrides):
    from engine.config.loader import build_config
    from engine.trainer.ppo_trainer import PPOTrainer

    cfg = build_config(["data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
                        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "trainer.n_gpus_per_node=1", *overrides])
    manager = RewardManager(tok, picky)
    trainer = PPOTrainer(cfg, tok, None, None, manager, manager, None, None, total_steps=1)
    return trainer, cfg


def _scored(trainer, tok, answers: list[str], uids: list[str]):
    import numpy as np

    batch, _ = make_batch(tok, answers, ["x"] * len(answers), ["1"] * len(answers))
    batch.meta["uid"] = np.array(uids, dtype=object)
    reward = trainer.reward_fn(batch)
    batch.tensors["token_level_scores"] = reward.token_level_scores
    return batch, reward


def test_the_key_makes_the_sync_trainers_training_reward_mark_and_validations_raise(tokenizer):  # noqa: F811
    off, _ = _trainer(tokenizer)
    assert not off.refills_failed and not off.selects_groups and not off.reward_fn.mark_failures
    on, _ = _trainer(tokenizer, "trainer.v1.sampler.sync_refill_failed_groups=True")
    assert on.refills_failed and on.selects_groups
    assert on.reward_fn.mark_failures and not on.val_reward_fn.mark_failures  # validation still raises


def _refiller(trainer, tok, answers: list[str], uids: list[str]):
    """keep_groups' `more(count)`: always the same scored answers; the list records each call's count."""
    asked: list = []

    def more(count=None):
        asked.append(count)
        return _scored(trainer, tok, answers, uids)

    return more, asked


def _keep(trainer, batch, reward, log, step, more):
    """The sync trainer's group selection (batches.select_groups), the evicted groups as the samples it stores."""
    selection = select_groups(trainer.cfg, batch, reward, more, step, sync=True)
    log.metrics.update(selection.metrics)
    return selection.batch, selection.reward, trainer.evicted_samples(selection.evicted, step)


def test_keep_groups_evicts_failed_groups_and_refills_exactly_the_missing_ones(tokenizer):  # noqa: F811
    trainer, _ = _trainer(tokenizer, "trainer.v1.sampler.sync_refill_failed_groups=True")
    more, asked = _refiller(trainer, tokenizer, ["1", "2"], ["c", "c"])

    log = StepLog()
    # group a fails (one answer contains 9), group b is fine: one group missing, one refilled
    batch, reward = _scored(trainer, tokenizer, ["1", "9", "1", "3"], ["a", "a", "b", "b"])
    batch, reward, dropped = _keep(trainer, batch, reward, log, 5, more)
    assert asked == [1]  # exactly the missing group
    assert list(batch["uid"]) == ["b", "b", "c", "c"] and not reward.failed and len(reward.scores) == 4
    assert log.metrics[METRIC] == 1 and log.metrics["train/num_gen_batches"] == 2
    assert dropped[0]["dropped"] == "rollout_failure: another answer of its group failed"
    assert dropped[1]["dropped"].startswith("rollout_failure: reward function picky failed")
    assert "nine is not allowed" in dropped[1]["dropped"]
    assert all(s["step"] == 5 for s in dropped) and [s["response"] for s in dropped] == ["1", "9"]


def test_failures_that_persist_stop_with_the_first_message_and_the_fix(tokenizer):  # noqa: F811
    trainer, _ = _trainer(tokenizer, "trainer.v1.sampler.sync_refill_failed_groups=True")
    more, calls = _refiller(trainer, tokenizer, ["9", "9"], ["d", "d"])

    batch, reward = _scored(trainer, tokenizer, ["1", "9", "1", "3"], ["a", "a", "b", "b"])
    with pytest.raises(RuntimeError) as err:
        _keep(trainer, batch, reward, StepLog(), 1, more)
    assert len(calls) == MAX_GEN_BATCHES - 1  # the fixed bound (DAPO's filter is off)
    text = str(err.value)
    assert "nine is not allowed" in text and "sync_refill_failed_groups" in text and "custom_reward_function" in text
    assert f"a fixed bound of {MAX_GEN_BATCHES}" in text


def test_with_dapos_filter_its_generation_limit_bounds_the_refills(tokenizer):  # noqa: F811
    trainer, _ = _trainer(tokenizer, "trainer.v1.sampler.sync_refill_failed_groups=True",
                          "algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=score",
                          "algorithm.filter_groups.max_num_gen_batches=3")
    log = StepLog()
    batch, reward = _scored(trainer, tokenizer, ["1", "9", "1", "3", "2", "2"], ["a", "a", "b", "b", "e", "e"])
    with pytest.raises(RuntimeError, match=r"algorithm.filter_groups.max_num_gen_batches=3"):
        _keep(trainer, batch, reward, log, 1, lambda count=None: _scored(trainer, tokenizer, ["9", "1"],
                                                                              ["f", "f"]))
    # one failed group and one without signal (e) are evicted, b kept; refills whole batches then
    log = StepLog()
    batch, reward = _scored(trainer, tokenizer, ["1", "9", "1", "3", "2", "2"], ["a", "a", "b", "b", "e", "e"])
    more, asked = _refiller(trainer, tokenizer, ["1", "4"], ["g", "g"])

    batch, reward, dropped = _keep(trainer, batch, reward, log, 1, more)
    assert asked == [None] and list(batch["uid"]) == ["b", "b", "g", "g"]
    assert log.metrics[METRIC] == 1 and log.metrics["training/filter_groups/evicted_samples"] == 1
    assert sorted(s["dropped"].split(":")[0] for s in dropped) == ["algorithm.filter_groups"] * 2 + [
        "rollout_failure"] * 2
