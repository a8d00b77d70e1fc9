"""The async trainer modes on the tiny model, in this process (engine.train, one CPU worker, fp32): with the strict
threshold (max_off_policy_threshold=1: on-policy) an async run's losses and metrics equal the sync run's step for
step; with the rollout one batch ahead every token carries the version that produced it and verl's staleness
metrics say so (issue 29)."""
from __future__ import annotations

import math
import re

import psutil
import pytest

from tests.integration.helpers import base_args

SMALL = {"algorithm.adv_estimator": "grpo", "trainer.n_gpus_per_node": 1, "data.train_batch_size": 4,
         "actor_rollout_ref.rollout.n": 2, "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4, "trainer.total_training_steps": 3,
         "trainer.val_before_train": "False", "trainer.test_freq": 2, "data.val_max_samples": 8,
         "trainer.logger": "[console]", "trainer.save_freq": -1,
         # what the async modes turn on by default, set here for the sync run too: static decode (the rollout's
         # log-probs) and verl's decoupled token TIS
         "+actor_rollout_ref.rollout.engine_kwargs.hf.decode": "static",
         "algorithm.rollout_correction.rollout_is": "token"}
# differ between any two runs (wall time, throughput) or describe the mode itself
VARIABLE = ("timing_s/", "perf/", "memory/", "throughput", "timing_per_token", "timeline/")


def _train(tiny_model, arith_data, out, **extra):
    from engine import train

    return train(base_args(tiny_model, arith_data, out, **{**SMALL, **extra}))


def _comparable(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not any(p in k for p in VARIABLE)}


def _differ(a: dict, b: dict) -> dict:
    """The comparable metrics two steps disagree on (NaN equals NaN); {} when equal to the bit."""
    a, b = _comparable(a), _comparable(b)
    assert set(a) == set(b), f"keys only in one run: {set(a) ^ set(b)}"
    return {k: (a[k], b[k]) for k in a if not (a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])))}


_sync_runs: dict[tuple, object] = {}


def _sync_run(tiny_model, arith_data, out):
    """The sync run (SMALL) the strict async modes are compared with, trained once per module into the first caller's
    `out`: the callers read its metrics only, and the in-process runs are seeded, so it is the same run to the bit
    whenever it is trained."""
    key = (tiny_model, str(arith_data))
    if key not in _sync_runs:
        _sync_runs[key] = _train(tiny_model, arith_data, out)
    return _sync_runs[key]


@pytest.mark.slow  # a 3-step engine run (and the sync run, once per module)
@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_strict_async_equals_sync_step_for_step(tiny_model, arith_data, tmp_path, mode, capfd):
    """separate_async samples in a rollout process of its own (engine/workers/behaviour/process.py): built as the worker builds its
    copy, on the worker's random state, so the tokens and log-probs that cross the pipe are the sync run's."""
    sync = _sync_run(tiny_model, arith_data, tmp_path / "sync")
    capfd.readouterr()
    strict = _train(tiny_model, arith_data, tmp_path / mode, **{
        "trainer.v1.trainer_mode": mode, "trainer.v1.sampler.max_off_policy_threshold": 1,
        "trainer.v1.separate_async.parameter_sync_step": 2})  # 4 = 2 × 2
    started = re.findall(r"rollout process started \(pid (\d+)\)", capfd.readouterr().out)
    if mode == "separate_async":  # its own process, stopped and reaped at the end of the run
        assert len(started) == 1 and not psutil.pid_exists(int(started[0])), started
    else:
        assert not started  # colocate_async: the copy in the worker's own process
    assert sorted(sync.metrics) == sorted(strict.metrics) == [1, 2, 3]
    for step in (1, 2, 3):
        a = sync.metrics[step]
        assert "val-core/arith/reward/mean@1" in a or step == 1  # validation ran between steps (test_freq=2)
        differ = _differ(a, strict.metrics[step])
        assert not differ, f"step {step}: sync vs {mode} (threshold 1): {differ}"
        assert a["training/off_policy/trajectory_staleness/max"] == 0 and a["training/off_policy/trajectory_spans/max"] == 1
    assert "timing_s/update_weights" in strict.metrics[1]  # the behaviour policy got the weights after each update


@pytest.mark.slow  # one 3-step engine run
def test_one_batch_ahead_trains_on_the_previous_version_and_says_so(tiny_model, arith_data, tmp_path):
    run = _train(tiny_model, arith_data, tmp_path / "ahead", **{
        "trainer.v1.trainer_mode": "colocate_async", "trainer.v1.sampler.max_off_policy_threshold": 2,
        "trainer.v1.colocate_async.num_warmup_batches": 1})
    staleness = {s: run.metrics[s]["training/off_policy/trajectory_staleness/max"] for s in (1, 2, 3)}
    # step 1 trains on the initial weights (version 0, on-policy); step 2's batch was generated with version 0
    # while step 1 trained, step 3's with version 1 while step 2 trained: one version behind
    assert staleness == {1: 0, 2: 1, 3: 1}
    for s in (1, 2, 3):
        m = run.metrics[s]
        assert m["training/off_policy/trajectory_spans/max"] == 1  # no weight update mid-answer (no partial rollout)
        assert m["training/off_policy/trajectory_staleness_worst/min"] == staleness[s]
        assert math.isfinite(m["actor/pg_loss"]) and "rollout_corr/rollout_is_mean" in m  # token TIS by default
    # the behaviour policy really is a version behind: on-policy at step 1 the rollout's and the actor's token
    # probabilities agree to rounding; at steps 2 and 3 they differ by the last update
    assert run.metrics[1]["training/rollout_probs_diff_max"] < 1e-5
    assert run.metrics[2]["training/rollout_probs_diff_max"] > 1e-3 and run.metrics[3]["training/rollout_probs_diff_max"] > 1e-3
    # the rollout's weight check reports after each new version only: step 2's batch reused version 0, so it moved
    # nothing and must not read as an actor that stopped moving
    assert "rollout/actor_weight_change" in run.metrics[3] and "rollout/actor_weight_change" not in run.metrics[2]


def _samples(out) -> list[dict]:
    import json

    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow  # three short engine runs
def test_a_resume_reissues_the_prompts_that_were_in_flight(tiny_model, arith_data, tmp_path):
    ahead = {"trainer.v1.trainer_mode": "colocate_async", "trainer.v1.sampler.max_off_policy_threshold": 2,
             "trainer.logger": "[console,file]"}
    whole = _train(tiny_model, arith_data, tmp_path / "whole", **ahead)
    _train(tiny_model, arith_data, tmp_path / "cut", **ahead, **{"trainer.total_training_steps": 2,
                                                                 "trainer.save_freq": 2})
    resumed = _train(tiny_model, arith_data, tmp_path / "cut", **ahead)  # the same directory: resumes at step 2
    assert sorted(resumed.metrics) == [3]

    def prompts(out, step):
        return sorted(s["prompt_index"] for s in _samples(out) if s["step"] == step and s["split"] == "train")

    # step 3's prompts were pulled (and maybe generated) before step 2's checkpoint; the resume asks for them again
    assert prompts(tmp_path / "cut", 3) == prompts(tmp_path / "whole", 3) and len(prompts(tmp_path / "whole", 3)) == 8
    # generated again, with the resumed weights: on-policy at the first step after the resume
    assert resumed.metrics[3]["training/off_policy/trajectory_staleness/max"] == 0
    assert whole.metrics[3]["training/off_policy/trajectory_staleness/max"] == 1


# DAPO's dynamic sampling: the tiny model often scores all 4 answers to a prompt the same, so groups are dropped
# and refilled (asserted below: a test of the filter must see it filter)
DAPO = {"algorithm.filter_groups.enable": "True", "algorithm.filter_groups.metric": "reward",
        "algorithm.filter_groups.max_num_gen_batches": 10, "actor_rollout_ref.rollout.n": 4,
        "trainer.logger": "[console,file]"}
STRICT = {"trainer.v1.trainer_mode": "colocate_async", "trainer.v1.sampler.max_off_policy_threshold": 1}


def _train_prompts(out, step) -> tuple[list, list]:
    """The prompts of one step's trained and dropped groups (sorted data-set rows, one per answer)."""
    train = [s for s in _samples(out) if s["step"] == step and s["split"] == "train"]
    return (sorted(s["prompt_index"] for s in train if not s.get("dropped")),
            sorted(s["prompt_index"] for s in train if s.get("dropped")))


@pytest.fixture(scope="module")
def sync_dapo_run(tiny_model, arith_data, tmp_path_factory):
    """The sync run with DAPO's filter, trained once for both async modes' comparisons: (its folder, its result)."""
    out = tmp_path_factory.mktemp("sync-dapo") / "run"
    return out, _train(tiny_model, arith_data, out, **DAPO)


@pytest.mark.slow  # three short engine runs (and the module's sync run with DAPO's filter)
@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_strict_async_with_dapos_filter_equals_sync_and_resumes_exactly(tiny_model, arith_data, tmp_path, mode,
                                                                        sync_dapo_run):
    """The rollout thread scores, filters and refills each batch with the sync trainer's functions: at threshold 1
    the run is the sync run to the bit (the same groups dropped, the same refills, the same batch), dropped groups
    reach the samples store marked `dropped`, and a checkpoint's resume trains the same next step."""
    strict_mode = {**STRICT, "trainer.v1.trainer_mode": mode, "trainer.v1.separate_async.parameter_sync_step": 2}
    sync_out, sync = sync_dapo_run
    strict = _train(tiny_model, arith_data, tmp_path / "async", **DAPO, **strict_mode)
    steps = (1, 2, 3)
    evicted = [sync.metrics[s]["training/filter_groups/evicted_samples"] for s in steps]
    generations = [sync.metrics[s]["train/num_gen_batches"] for s in steps]
    assert sum(evicted) > 0 and max(generations) > 1, (evicted, generations)  # it filtered and refilled
    for step in steps:
        differ = _differ(sync.metrics[step], strict.metrics[step])
        assert not differ, f"step {step}: sync vs {mode} with DAPO's filter (threshold 1): {differ}"
        m = strict.metrics[step]
        seen = 4 * generations[step - 1]  # groups generated in the step: 4 prompts a generation
        assert m["train/kept_group_fraction"] == (seen - evicted[step - 1]) / seen
        assert m["critic/degenerate_group_ratio"] == 0  # only groups with a learning signal were trained
        # the dropped groups' answers are stored, marked, in both modes alike; the trained batch is full
        trained, dropped = _train_prompts(tmp_path / "async", step)
        assert (trained, dropped) == _train_prompts(sync_out, step)
        assert len(trained) == 4 * 4 and len(dropped) == 4 * evicted[step - 1]
    # a checkpoint after step 2, resumed: the loader's state reissues exactly the prompts not trained yet (step 2's
    # refills included), and the resumed step 3 is the uninterrupted run's to the bit
    _train(tiny_model, arith_data, tmp_path / "cut", **DAPO, **strict_mode, **{"trainer.total_training_steps": 2,
                                                                               "trainer.save_freq": 2})
    resumed = _train(tiny_model, arith_data, tmp_path / "cut", **DAPO, **strict_mode)
    assert sorted(resumed.metrics) == [3]
    # (the rollout's weight check starts afresh in a new process: no earlier weights to measure a move from)
    assert _differ(strict.metrics[3], resumed.metrics[3]) == {
        "rollout/actor_weight_change": (strict.metrics[3]["rollout/actor_weight_change"], 0.0)}
    assert _train_prompts(tmp_path / "cut", 3) == _train_prompts(tmp_path / "async", 3)


@pytest.mark.slow  # one short engine run
def test_one_batch_ahead_dapos_filter_refills_each_batch_to_its_size(tiny_model, arith_data, tmp_path):
    """The rollout thread filters and refills step s + 1's batch while step s trains: every batch is full, every
    refill is on the batch's own version, each step's dropped groups are stored under that step, and no prompt is
    pulled twice (steps 1-3 stay within the first epoch of 64 prompts)."""
    out = tmp_path / "ahead"
    run = _train(tiny_model, arith_data, out, **DAPO, **{
        "trainer.v1.trainer_mode": "colocate_async", "trainer.v1.sampler.max_off_policy_threshold": 2,
        "trainer.test_freq": -1})
    steps = (1, 2, 3)
    assert sum(run.metrics[s]["training/filter_groups/evicted_samples"] for s in steps) > 0
    assert max(run.metrics[s]["train/num_gen_batches"] for s in steps) > 1
    pulled = []
    for step in steps:
        m = run.metrics[step]
        # one version per batch, refills included: 0 for step 1, then one behind
        assert m["training/off_policy/trajectory_staleness/max"] == m["training/off_policy/trajectory_staleness/min"] \
            == (0 if step == 1 else 1) and m["training/off_policy/trajectory_spans/max"] == 1
        assert m["critic/degenerate_group_ratio"] == 0
        trained, dropped = _train_prompts(out, step)
        assert len(trained) == 4 * 4 and len(dropped) == 4 * m["training/filter_groups/evicted_samples"]
        pulled += sorted(set(trained) | set(dropped))
        assert len(set(trained) | set(dropped)) == 4 * m["train/num_gen_batches"] - m[
            "training/filter_groups/discarded_surplus_samples"]  # surplus groups are generated but not stored
    assert len(pulled) == len(set(pulled))


@pytest.mark.slow  # one short engine run
def test_dapos_limit_on_generations_stops_an_async_run_with_the_sync_trainers_error(tiny_model, arith_data, tmp_path):
    with pytest.raises(RuntimeError, match="rollout thread failed") as err:
        _train(tiny_model, arith_data, tmp_path / "limit", **{
            **DAPO, **STRICT, "algorithm.filter_groups.max_num_gen_batches": 1, "trainer.total_training_steps": 1})
    # the sync trainer's message, naming the key and the fix, as the cause
    assert "max_num_gen_batches=1" in str(err.value.__cause__) and "raise max_num_gen_batches" in str(err.value)


@pytest.mark.slow  # one short engine run
def test_bypass_mode_takes_the_rollouts_log_probs_as_the_old_ones(tiny_model, arith_data, tmp_path):
    run = _train(tiny_model, arith_data, tmp_path / "bypass", **{
        "algorithm.rollout_correction.rollout_is": "null", "algorithm.rollout_correction.bypass_mode": "True",
        "trainer.total_training_steps": 2})
    for step in (1, 2):
        m = run.metrics[step]
        assert "timing_s/old_log_prob" not in m  # no old-log-prob pass
        assert m["training/rollout_probs_diff_max"] == 0.0  # old log-probs = the rollout's, exactly
        assert math.isfinite(m["actor/pg_loss"])


@pytest.mark.ray
@pytest.mark.slow  # an engine run through Ray
def test_through_ray_one_worker_strict_async_equals_the_in_process_sync_run(tiny_model, arith_data, tmp_path):
    import json

    import torch

    from tests.integration.helpers import run_engine

    sync = _sync_run(tiny_model, arith_data, tmp_path / "sync")
    out = tmp_path / "ray"
    # the Ray worker gets this process's CPU threads (the in-process run's), so the kernels split work alike
    args = base_args(tiny_model, arith_data, out, **{**SMALL, "trainer.logger": "[console,file]", "ray_init.mode": "ray",
                                                     "ray_init.num_cpus": torch.get_num_threads(),
                                                     "trainer.v1.trainer_mode": "colocate_async",
                                                     "trainer.v1.sampler.max_off_policy_threshold": 1})
    result = run_engine(args, tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = {r["step"]: r["data"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    for step in (1, 2, 3):
        for key in ("actor/pg_loss", "actor/grad_norm", "critic/score/mean", "response_length/mean"):
            assert records[step][key] == pytest.approx(sync.metrics[step][key], rel=1e-5, abs=1e-7), (step, key)


@pytest.mark.slow  # one 3-step engine run
@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_partial_rollout_run_reports_versions_timeline_and_the_wait(tiny_model, arith_data, tmp_path, monkeypatch,
                                                                     mode):
    """One batch ahead with partial rollout on: whether an update lands mid-answer depends on the threads' timing
    (the forced, exact case is tests/unit/test_async_partial_rollout.py), so this checks what must hold either way:
    every token's version lies between the batch's start version and the trained step's weights, the timeline's
    spans are ordered, and the trainer's wait for the batch is a heartbeat phase of its own. In separate_async the
    publish reaches the rollout process during its generation (the child's reader stores it at once)."""
    from tests.integration import phase_recorder

    phases = tmp_path / "phases.txt"
    for key, value in phase_recorder.hook_env(phases).items():
        monkeypatch.setenv(key, value)
    run = _train(tiny_model, arith_data, tmp_path / "partial", **{
        "trainer.v1.trainer_mode": mode, "trainer.v1.sampler.max_off_policy_threshold": 2,
        "trainer.v1.separate_async.parameter_sync_step": 2,
        "trainer.v1.partial_rollout": "True", "trainer.v1.partial_rollout_chunk": 4})
    for s in (1, 2, 3):
        m = run.metrics[s]
        # step s's batch started on version max(0, s - 2) and may switch only up to s - 1 (the trainer's weights)
        assert m["training/off_policy/trajectory_staleness_worst/max"] <= (0 if s == 1 else 1)
        assert m["training/off_policy/trajectory_staleness/min"] >= 0
        # an answer spans two versions exactly when the rollout switched weights mid-answer in this step (at most
        # once: the batch starts one version behind the newest it may take)
        switched = m["rollout/partial_switches"] > 0
        assert m["training/off_policy/trajectory_spans/max"] == (2 if switched else 1), (s, m["rollout/partial_switches"])
        assert math.isfinite(m["actor/pg_loss"])
        assert m["timeline/rollout_start_s"] <= m["timeline/rollout_end_s"] <= m["timeline/train_start_s"] \
            <= m["timeline/train_end_s"]
        assert m["timing_s/wait_rollout"] <= m["timing_s/gen"]
    assert run.metrics[1]["training/off_policy/trajectory_spans/max"] == 1  # nothing to switch to during step 1's
    for s in (2, 3):
        assert run.metrics[s - 1]["timeline/train_end_s"] <= run.metrics[s]["timeline/train_start_s"]
    assert phase_recorder.phases(phases, 2)[:2] == ["gen", "wait_rollout"]  # the hook records from step 2 on
