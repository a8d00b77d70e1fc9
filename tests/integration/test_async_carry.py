"""Carry-over in a real run (trainer.v1.carry_over_groups; engine/trainer/asynchronous/carry.py), the tiny model in this
process: 4 prompt groups per batch and 4 more in flight, answers generated a token per chunk, so each step trains the
first 4 groups to finish and the slower ones carry on into the next step on newer weights. With the rollout on-policy
ahead of nothing (num_warmup_batches=0) and the threshold at 2, a group carried twice would be trained at age 3:
`drop` evicts it (counted under verl's names; refilled, the batch keeps its size), `wait` makes the round finish it
first. The runs are deterministic (exact versions, no run-ahead), so what happens is the same on every machine.
The pool's rules with planted slow answers: tests/unit/test_async_carry.py."""
from __future__ import annotations

import json
import math

import pytest

from tests.integration.helpers import base_args

B, N, EXTRA, THRESHOLD, STEPS = 4, 2, 4, 2, 6
P = "training/off_policy"


def _run(tiny_model, arith_data, out, **extra):
    from engine import train

    return train(base_args(tiny_model, arith_data, out, **{
        "algorithm.adv_estimator": "grpo", "trainer.n_gpus_per_node": 1, "data.train_batch_size": B,
        "actor_rollout_ref.rollout.n": N, "actor_rollout_ref.actor.ppo_mini_batch_size": B,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": B * N, "trainer.total_training_steps": STEPS,
        "trainer.val_before_train": "False", "trainer.test_freq": -1, "trainer.save_freq": -1,
        "trainer.logger": "['console','file']", "+actor_rollout_ref.rollout.engine_kwargs.hf.decode": "static",
        "trainer.use_v1": "True", "trainer.v1.trainer_mode": "colocate_async",
        "trainer.v1.colocate_async.num_warmup_batches": 0, "trainer.v1.sampler.max_off_policy_threshold": THRESHOLD,
        "trainer.v1.carry_over_groups": EXTRA, "trainer.v1.partial_rollout_chunk": 1, **extra}))


def _samples(out) -> list[dict]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow  # a 6-step engine run each
@pytest.mark.parametrize("strategy", ["drop", "wait"])
def test_carry_over_trains_the_first_groups_to_finish_within_the_threshold(tiny_model, arith_data, tmp_path, strategy):
    out = tmp_path / strategy
    run = _run(tiny_model, arith_data, out, **{"trainer.v1.sampler.max_off_policy_strategy": strategy})
    assert sorted(s for s in run.metrics if s > 0) == list(range(1, STEPS + 1))
    worst = {s: run.metrics[s][f"{P}/trajectory_staleness_worst/max"] for s in range(1, STEPS + 1)}
    spans = {s: run.metrics[s][f"{P}/trajectory_spans/max"] for s in range(1, STEPS + 1)}
    evicted = sum(run.metrics[s].get(f"{P}/evicted_samples", 0.0) for s in range(1, STEPS + 1))
    # never trained past the threshold: age = step - oldest version <= 2, i.e. (step - 1) - oldest <= 1
    assert max(worst.values()) <= THRESHOLD - 1, worst
    # carried answers crossed a weight update (tokens of two versions), and some group was carried at all
    assert max(spans.values()) == 2, spans
    assert any(run.metrics[s]["rollout/carried_tokens"] > 0 for s in range(1, STEPS)), run.metrics
    if strategy == "drop":
        assert evicted > 0, "no group was carried twice: the test checks nothing about drop"
        ages = [m[f"{P}/evicted_samples_staleness/max"] for m in run.metrics.values() if f"{P}/evicted_samples" in m]
        assert min(ages) == THRESHOLD + 1  # evicted as soon as it would pass the threshold
    else:
        assert evicted == 0
        assert max(worst.values()) == THRESHOLD - 1  # a group was waited for and trained at the threshold
    # every batch is full: B groups of N answers, each group's answers on one uid
    train = [s for s in _samples(out) if s["split"] == "train"]
    for step in range(1, STEPS + 1):
        rows = [s for s in train if s["step"] == step]
        assert len(rows) == B * N, (step, len(rows))
        assert len({s["group_uid"] for s in rows}) == B
        assert all(math.isfinite(s["score"]) for s in rows)


@pytest.mark.slow  # a 1-step run and its resume to step 3
def test_a_resume_reissues_the_groups_in_flight_at_the_checkpoint(tiny_model, arith_data, tmp_path):
    """Cut at a step-1 checkpoint and resumed: the checkpoint lists the prompts pulled and not yet trained (the
    groups carried past step 1; verl reissues its pending and running groups alike), none of them trained before
    it; with `wait` a group is trained within one carry, so each of them is trained at step 2 or 3 of the resumed
    run."""
    out = tmp_path / "run"
    common = {"trainer.save_freq": 1, "trainer.v1.sampler.max_off_policy_strategy": "wait"}
    _run(tiny_model, arith_data, out, **common, **{"trainer.total_training_steps": 1})
    state = json.loads((out / "global_step_1" / "trainer_state.json").read_text())
    in_flight = [row for _, row in state["loader"]["reissue"]]
    # the arith data's prompt_index is its row (extra_info.index = the row written)
    trained = lambda steps: {s["prompt_index"] for s in _samples(out) if s["split"] == "train" and s["step"] in steps}
    assert len(in_flight) == EXTRA and len(set(in_flight)) == EXTRA, in_flight  # B were taken of B + EXTRA
    assert not set(in_flight) & trained({1})
    resumed = _run(tiny_model, arith_data, out, **common, **{"trainer.total_training_steps": 3})
    assert sorted(s for s in resumed.metrics if s > 0) == [2, 3]
    assert set(in_flight) <= trained({2, 3}), (in_flight, trained({2, 3}))
