"""Failed groups on the tiny model, in this process (engine.train, one CPU worker): a custom reward function that
raises for chosen prompts (data-set rows 1, 4, 7, ...: every third) fails their groups. The async modes evict and
refill them on the batch's version; sync does with trainer.v1.sampler.sync_refill_failed_groups=True and otherwise
fails the run with the reward function's error; failures that persist stop the run with a clear error (issue 29)."""
from __future__ import annotations

import json

import pytest

from engine.trainer.failed_groups import METRIC
from tests.integration.test_async_cpu import _differ, _train

PICKY = '''
CALLS = [0]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Raises for every third data-set row (1, 4, 7, ...), whatever the answer; else the arithmetic reward."""
    CALLS[0] += 1
    if {always} and CALLS[0] > 1:  # the first call is main_ppo's trial call, which must pass
        raise ValueError("this reward always fails")
    if extra_info["index"] % 3 == 1:
        raise ValueError(f"no reward for row {{extra_info['index']}}")
    return float(solution_str.strip() == str(ground_truth).strip())
'''
STRICT_ASYNC = {"trainer.v1.trainer_mode": "colocate_async", "trainer.v1.sampler.max_off_policy_threshold": 1}
# validation's reward still raises (failed groups are only refilled in training): no validation here
QUIET = {"trainer.test_freq": -1, "trainer.val_before_train": "False", "trainer.logger": "[console,file]"}


def _reward(tmp_path, always: bool = False) -> dict:
    path = tmp_path / ("always.py" if always else "picky.py")
    path.write_text(PICKY.format(always=always))
    return {"custom_reward_function.path": str(path), "custom_reward_function.name": "compute_score"}


def _train_samples(out) -> list[dict]:
    lines = (out / "samples.jsonl").read_text().splitlines()
    return [s for s in map(json.loads, filter(str.strip, lines)) if s["split"] == "train"]


def _assert_failed_groups_refilled(run, out):
    """Every trained batch is full (4 prompts × 2 answers) and holds no failed prompt; the evicted groups' answers are
    stored marked `dropped` under their step, and verl's metric counts them — and failures really happened."""
    samples = _train_samples(out)
    for step in (1, 2, 3):
        trained = [s for s in samples if s["step"] == step and not s.get("dropped")]
        dropped = [s for s in samples if s["step"] == step and s.get("dropped")]
        assert len(trained) == 4 * 2 and all(s["prompt_index"] % 3 != 1 for s in trained)
        assert len(dropped) == 2 * run.metrics[step].get(METRIC, 0)
        assert all(s["prompt_index"] % 3 == 1 and s["dropped"].startswith("rollout_failure: ") for s in dropped)
        assert all("no reward for row" in s["dropped"] for s in dropped)
    assert sum(run.metrics[s].get(METRIC, 0) for s in (1, 2, 3)) > 0  # groups did fail
    assert max(run.metrics[s].get("train/num_gen_batches", 1) for s in (1, 2, 3)) > 1  # and were refilled


@pytest.mark.slow  # one 3-step engine run
@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_async_one_batch_ahead_evicts_and_refills_failed_groups(tiny_model, arith_data, tmp_path, mode):
    out = tmp_path / "ahead"
    run = _train(tiny_model, arith_data, out, **_reward(tmp_path), **QUIET, **{
        "trainer.v1.trainer_mode": mode, "trainer.v1.sampler.max_off_policy_threshold": 2,
        "trainer.v1.separate_async.parameter_sync_step": 2})
    _assert_failed_groups_refilled(run, out)
    for step in (2, 3):  # refills included, each batch is on one version, one behind
        m = run.metrics[step]
        assert m["training/off_policy/trajectory_staleness/max"] == m["training/off_policy/trajectory_staleness/min"] \
            == 1


@pytest.mark.slow  # two 3-step engine runs
def test_strict_async_and_sync_with_the_key_evict_and_refill_failed_groups_alike(tiny_model, arith_data, tmp_path):
    sync = _train(tiny_model, arith_data, tmp_path / "sync", **_reward(tmp_path), **QUIET,
                  **{"trainer.v1.sampler.sync_refill_failed_groups": "True"})
    _assert_failed_groups_refilled(sync, tmp_path / "sync")
    strict = _train(tiny_model, arith_data, tmp_path / "async", **_reward(tmp_path), **QUIET, **STRICT_ASYNC)
    _assert_failed_groups_refilled(strict, tmp_path / "async")
    # at threshold 1 the async run is the sync run to the bit: the same groups evicted, the same refills, the same batch
    for step in (1, 2, 3):
        assert not _differ(sync.metrics[step], strict.metrics[step]), step
    def answers(out):
        return sorted((s["step"], s["prompt_index"], s["response"], s["score"], s.get("dropped", "")[:60])
                      for s in _train_samples(out))

    assert answers(tmp_path / "sync") == answers(tmp_path / "async")


@pytest.mark.slow  # one short engine run
def test_sync_without_the_key_fails_the_run_with_the_reward_functions_error(tiny_model, arith_data, tmp_path):
    from engine.reward.manager import RewardComputeError

    with pytest.raises(RewardComputeError, match=r"no reward for row \d+"):
        _train(tiny_model, arith_data, tmp_path / "off", **_reward(tmp_path), **QUIET)


@pytest.mark.slow  # one short engine run
def test_a_reward_function_that_always_fails_stops_the_async_run_with_a_clear_error(tiny_model, arith_data, tmp_path):
    with pytest.raises(RuntimeError, match="rollout thread failed") as err:
        _train(tiny_model, arith_data, tmp_path / "always", **_reward(tmp_path, always=True), **QUIET, **STRICT_ASYNC,
               **{"trainer.total_training_steps": 1})
    text = str(err.value)
    assert "this reward always fails" in text and "10 generation batches" in text
    assert "custom_reward_function.path" in text and "always, in the async modes" in text
