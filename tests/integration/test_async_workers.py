"""The async trainer modes on two CPU workers through a real Ray (engine/trainer/ASYNC.md, "Several workers"): the
behaviour copy is unsharded, so the rollout thread's generation runs no collective beside the update's. With the
strict threshold (max_off_policy_threshold=1) an async run is the two-worker sync run to the bit, step for step;
one batch ahead the staleness is that of one worker; partial rollout and carry-over keep their invariants; and a Ray
worker actor of an async run takes the rollout thread's call while another runs."""
from __future__ import annotations

import json
import threading

import pytest

from tests.integration.helpers import base_args, run_engine
from tests.integration.test_async_cpu import SMALL, _differ

pytestmark = [pytest.mark.ray]
# two workers, one CPU thread each (ray_init.num_cpus=2 over 2 workers), so every run splits the kernels alike
TWO = {**SMALL, "trainer.n_gpus_per_node": 2, "ray_init.num_cpus": 2, "trainer.logger": "[console,file]"}
STRICT = {"trainer.v1.sampler.max_off_policy_threshold": 1, "trainer.v1.separate_async.parameter_sync_step": 2}


def _run(tiny_model, arith_data, out, **extra) -> dict[int, dict]:
    """A 3-step engine run on two Ray workers; its metrics by step (a step's records merged: validation's too)."""
    result = run_engine(base_args(tiny_model, arith_data, out, **{**TWO, **extra}), out.parent, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "ranks 0,1" in result.stdout  # both workers ran (the `started` line's placement)
    steps: dict[int, dict] = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            steps.setdefault(record["step"], {}).update(record["data"])
    return steps


@pytest.fixture(scope="module")
def sync_two(tiny_model, arith_data, tmp_path_factory):
    return _run(tiny_model, arith_data, tmp_path_factory.mktemp("sync") / "run")


@pytest.mark.slow  # two engine runs through Ray
@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_strict_async_on_two_workers_equals_sync_on_two_step_for_step(tiny_model, arith_data, tmp_path, sync_two,
                                                                      mode):
    """Each worker generates its half of the batch on its own random stream, as the sync rollout does; the copy
    holds the gathered weights the sync rollout generates with, so the tokens, log-probs and updates are equal."""
    strict = _run(tiny_model, arith_data, tmp_path / mode, **{"trainer.v1.trainer_mode": mode, **STRICT})
    assert sorted(sync_two) == sorted(strict) == [1, 2, 3]
    assert "val-core/arith/reward/mean@1" in sync_two[2]  # validation ran between steps (test_freq=2)
    for step in (1, 2, 3):
        differ = _differ(sync_two[step], strict[step])
        assert not differ, f"step {step}: sync vs {mode} on 2 workers (threshold 1): {differ}"
    assert "timing_s/update_weights" in strict[1]  # the behaviour policy got the weights after each update


@pytest.mark.slow  # one engine run through Ray
def test_one_batch_ahead_on_two_workers_trains_on_the_previous_version(tiny_model, arith_data, tmp_path):
    run = _run(tiny_model, arith_data, tmp_path / "ahead", **{
        "trainer.v1.trainer_mode": "colocate_async", "trainer.v1.sampler.max_off_policy_threshold": 2,
        "trainer.v1.colocate_async.num_warmup_batches": 1})
    staleness = {s: run[s]["training/off_policy/trajectory_staleness/max"] for s in (1, 2, 3)}
    assert staleness == {1: 0, 2: 1, 3: 1}
    for s in (1, 2, 3):
        assert run[s]["training/off_policy/trajectory_spans/max"] == 1
        assert run[s]["training/off_policy/trajectory_staleness_worst/min"] == staleness[s]
    # on-policy at step 1 the rollout's and the actor's token probabilities agree to rounding, then differ by the
    # last update: both workers' copies hold the full weights of the version they were asked for. (An update with no
    # gradient, every group scored alike, moves the weights by weight decay alone: 2e-5 here at step 2.)
    assert run[1]["training/rollout_probs_diff_max"] < 1e-5
    moved = [s for s in (2, 3) if run[s - 1]["actor/grad_norm"] > 0]
    assert moved, "no update with a gradient before steps 2-3: nothing to tell the versions apart"
    for s in moved:
        assert run[s]["training/rollout_probs_diff_max"] > 1e-3, s


class _Probe:
    """A worker whose first call returns only once a second call has reached the same actor."""

    def __init__(self, rank: int, world: int):
        self.arrived = threading.Event()

    def wait_for_another_call(self) -> bool:
        # waits for the state (the second call arrived), returning at once when it does; the timeout only bounds a
        # failure (a worker that runs one call at a time never delivers it while this one runs)
        return self.arrived.wait(timeout=600)

    def another_call(self) -> bool:
        self.arrived.set()
        return True


def test_a_ray_worker_of_an_async_run_takes_a_second_call_while_one_runs(tmp_path):
    """The rollout thread's behaviour_generate must not queue behind the main thread's update on the same actor."""
    import ray

    from engine.config import build_config
    from engine.distributed.ray_worker_group import Placement, RayWorkerGroup
    from engine.workers.launch import worker_concurrency

    args = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2"]
    assert worker_concurrency(build_config(args)) == 1  # sync: one call at a time, in order
    cfg = build_config(args + ["trainer.use_v1=True", "trainer.v1.trainer_mode=colocate_async"])
    assert worker_concurrency(cfg) == 2
    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        group = RayWorkerGroup(_Probe, Placement(1, 1, num_cpus=1, num_gpus=0), env_vars={},
                               max_concurrency=worker_concurrency(cfg))
        worker = group.workers[0]
        first = worker.wait_for_another_call.remote()
        assert ray.get(worker.another_call.remote(), timeout=600)  # (timeouts: failure guards, not waits)
        assert ray.get(first, timeout=600)  # it saw the second call arrive while it ran
        group.shutdown()
    finally:
        ray.shutdown()


@pytest.mark.slow  # one engine run through Ray
def test_partial_rollout_on_two_workers_keeps_every_token_within_its_steps_versions(tiny_model, arith_data, tmp_path):
    """One batch ahead with partial rollout: through Ray the publish can now land while a worker generates (two
    calls at once), and each worker switches on its own; whatever the timing, a batch's tokens lie between its
    start version and the trained step's weights, and an answer spans two versions exactly when some worker
    switched (rollout/partial_switches is the workers' max). Whether a switch happens depends on the timing (on
    this CPU the tiny model's batch is often done before the update is); the forced case is
    tests/unit/test_async_partial_rollout.py."""
    run = _run(tiny_model, arith_data, tmp_path / "partial", **{
        "trainer.v1.trainer_mode": "colocate_async", "trainer.v1.sampler.max_off_policy_threshold": 2,
        "trainer.v1.partial_rollout": "True", "trainer.v1.partial_rollout_chunk": 2})
    for s in (1, 2, 3):
        m = run[s]
        assert m["training/off_policy/trajectory_staleness_worst/max"] <= (0 if s == 1 else 1)
        assert m["training/off_policy/trajectory_staleness/min"] >= 0
        switched = m["rollout/partial_switches"] > 0
        assert m["training/off_policy/trajectory_spans/max"] == (2 if switched else 1), (s, m["rollout/partial_switches"])
    assert run[1]["training/off_policy/trajectory_spans/max"] == 1  # nothing to switch to during step 1's


@pytest.mark.slow  # one 6-step engine run through Ray
def test_carry_over_on_two_workers_fills_every_batch_within_the_threshold(tiny_model, arith_data, tmp_path):
    """Carry-over's chunks go through dp_call with however many answers are still running, split over the two
    workers: every batch is full, answers carry across an update, and no group is trained past the threshold."""
    steps, threshold = 6, 2
    out = tmp_path / "carry"
    run = _run(tiny_model, arith_data, out, **{
        "trainer.v1.trainer_mode": "colocate_async", "trainer.v1.colocate_async.num_warmup_batches": 0,
        "trainer.v1.sampler.max_off_policy_threshold": threshold, "trainer.v1.carry_over_groups": 4,
        "trainer.v1.partial_rollout_chunk": 1, "trainer.total_training_steps": steps, "trainer.test_freq": -1,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 4, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 8})
    assert sorted(s for s in run if s > 0) == list(range(1, steps + 1))
    assert max(run[s]["training/off_policy/trajectory_staleness_worst/max"] for s in run if s > 0) <= threshold - 1
    assert max(run[s]["training/off_policy/trajectory_spans/max"] for s in run if s > 0) == 2  # some answer carried
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line.strip()]
    for step in range(1, steps + 1):
        rows = [s for s in samples if s["split"] == "train" and s["step"] == step]
        assert len(rows) == 4 * 2 and len({s["group_uid"] for s in rows}) == 4, (step, len(rows))
