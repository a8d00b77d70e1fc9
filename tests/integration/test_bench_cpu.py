"""`python -m engine.bench` on the tiny workload on CPU: one timed step through the real engine (the worker
group, TrainWorker, PPOTrainer.train_step) prints one JSON line per phase with positive timings and throughputs;
the static-cache rollout's log-probs match the actor's recomputation."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO, engine_env

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # each test is a whole engine run


def run_bench(tmp_path, *args) -> list[dict]:
    env = engine_env()
    env["RLSTUDIO_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-m", "engine.bench", "--tiny", "--warmup", "0", "--steps", "1", *args],
                          check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_bench_grpo_static_rollout(tmp_path):
    lines = run_bench(tmp_path, "+actor_rollout_ref.rollout.engine_kwargs.hf.decode=static")
    phases = {r["phase"]: r for r in lines if r.get("impl") == "rlstudio"}
    for name in ("gen", "ref", "update_actor", "step"):
        assert phases[name]["timing_s"] > 0 and phases[name]["tokens_per_s"] > 0, phases[name]
    assert phases["old_log_prob"]["timing_s"] == 0.0  # on-policy: computed inside the update
    # per step, what the update ran with (issue 40 §4): 8 sequences in micro-batches of 4 rows, their real tokens
    update = phases["update_actor"]
    assert update["micro_batches_runs"] == [2] and update["micro_tokens_max_runs"][0] <= 4 * 24
    assert update["micro_padded_tokens_runs"][0] >= update["micro_tokens_max_runs"][0]
    assert phases["memory"]["cpu_max_rss_gb"] > 0
    check = phases["check"]
    assert check["response_length_mean"] == 8.0  # min = max new tokens
    assert check["rollout_log_probs_absdiff"] is not None and check["rollout_log_probs_absdiff"] < 1e-3


def test_bench_colocate_async_runs_through_the_async_driver(tmp_path):
    """The GPU comparison of issue 29 (W2, sync vs colocate_async) runs this path: the bench's steps go through
    AsyncBatches, one batch ahead, and the step's wall time between step ends is reported beside timing_s/step."""
    lines = run_bench(tmp_path, "--warmup", "1", "--steps", "2", "trainer.use_v1=True",
                      "trainer.v1.trainer_mode=colocate_async", "trainer.v1.sampler.max_off_policy_threshold=2",
                      "algorithm.rollout_correction.bypass_mode=True")
    phases = {r["phase"]: r for r in lines if r.get("impl") == "rlstudio"}
    for name in ("step", "step_wall"):
        assert phases[name]["timing_s"] > 0 and phases[name]["answer_tokens_per_s"] > 0, phases[name]
        assert len(phases[name]["runs"]) == 2
    # steps 2 and 3 trained on batches generated one version behind (step 1's is on-policy, and is warm-up)
    assert phases["check"]["staleness_mean"] == 1.0
    assert phases["old_log_prob"]["timing_s"] == 0.0  # bypass: the rollout's log-probs are the old ones


def test_bench_ppo_dynamic_bsz(tmp_path):
    budget = 48  # tokens: 2 of the tiny workload's 24-token sequences per micro-batch
    lines = run_bench(tmp_path, "--algo", "ppo", "actor_rollout_ref.actor.use_dynamic_bsz=True",
                      f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={budget}", "critic.use_dynamic_bsz=True",
                      f"critic.ppo_max_token_len_per_gpu={budget}", f"critic.forward_max_token_len_per_gpu={budget}")
    phases = {r["phase"]: r for r in lines if r.get("impl") == "rlstudio"}
    for name in ("gen", "ref", "values", "update_critic", "update_actor", "step"):
        assert phases[name]["timing_s"] > 0, phases[name]


def test_bench_update_variants(tmp_path):
    """Every layout × accumulation mode times its updates: one each here (--warmup 0 --steps 1, as the bench's
    other tests; the defaults are one untimed and three timed)."""
    lines = run_bench(tmp_path, "--update-variants")
    variants = [r for r in lines if r["phase"] == "update_variant"]
    assert {(r["one_worker_units"], r["accumulation"]) for r in variants} == {
        (u, m) for u in ("root", "layers") for m in ("nosync", "gathered", "off")}
    assert all(r["timing_s"] > 0 and len(r["runs"]) == 1 for r in variants)
    assert [(r["one_worker_units"], r["accumulation"]) for r in variants if r["default"]] == [("root", "nosync")]
    kernels = [r for r in lines if r["phase"] == "logprob_kernels"]
    assert [r["chunk_rows"] for r in kernels] == [512, "one pass"]
    assert all(r["fwd_ms"] > 0 and r["bwd_ms"] > 0 for r in kernels)


def test_bench_w2_tiny_lengths_and_compaction(tmp_path):
    """W2 on toy shapes: GSM8K prompts, answers that end at the end token (eos-rate model), the static decoder
    with compaction; the histogram counts every answer and real-token accounting gives the mean length."""
    env_lines = run_bench_workload(tmp_path, "tiny-w2", "+actor_rollout_ref.rollout.engine_kwargs.hf.decode=static",
                                   "+actor_rollout_ref.rollout.engine_kwargs.hf.compact_every=2")
    rows = {r["phase"]: r for r in env_lines if r.get("impl") == "rlstudio"}
    hist = rows["response_lengths"]
    assert hist["count"] == 8 and sum(hist["bins"].values()) == 8
    assert 1 <= hist["mean"] < 24 and rows["check"]["response_length_mean"] == pytest.approx(hist["mean"], abs=0.1)
    assert rows["check"]["rollout_log_probs_absdiff"] < 1e-3


def run_bench_workload(tmp_path, workload, *args) -> list[dict]:
    env = engine_env()
    env["RLSTUDIO_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-m", "engine.bench", "--workload", workload, "--warmup", "0",
                           "--steps", "1", *args], check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_bench_decode_variants(tmp_path):
    """The rollout alone per decoder option: timings, what actually ran (on CPU without Triton's interpreter the
    fused sampling falls back to torch and says so), the log-prob check, and a profile table per variant."""
    lines = run_bench(tmp_path, "--decode-variants", "--profile", "--variants", "default,fused_sampling")
    variants = {r["variant"]: r for r in lines if r["phase"] == "decode_variant"}
    assert set(variants) == {"default", "fused_sampling"}
    for r in variants.values():
        assert r["timing_s"] > 0 and r["tokens_per_s"] > 0 and r["decode_steps"] == 8, r
        assert r["attention"] == "eager" and r["sampling"] == "torch" and r["compiled"] == "none", r
        assert r["rollout_log_probs_absdiff"] < 1e-4, r  # fp32: the rollout samples the actor's distribution
    profiles = [r for r in lines if r["phase"] == "decode_profile"]
    assert [r["variant"] for r in profiles] == ["default", "fused_sampling"]
    for r in profiles:
        assert r["kernels"] and 0 < sum(k["share"] for k in r["kernels"]) <= 1.0001, r
    env = engine_env()
    env["RLSTUDIO_CACHE"] = str(tmp_path / "cache")
    bad = subprocess.run([sys.executable, "-m", "engine.bench", "--tiny", "--decode-variants", "--variants", "fast"],
                         check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "unknown decode variant 'fast'" in bad.stderr, bad.stderr[-2000:]


def test_bench_checkpoint_save_first_and_later_blocking(tmp_path):
    """`python -m engine.bench.checkpoint_save` on the tiny model: one line per variant with every save's blocking
    seconds; with the buffers prepared ahead the saves allocate nothing (the allocation happened in the thread)."""
    env = engine_env()
    env["RLSTUDIO_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-m", "engine.bench.checkpoint_save", "--workload", "tiny", "--roles", "1",
                           "--saves", "2", "--out", str(tmp_path / "out.jsonl")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = {r["variant"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert set(lines) == {"at_save", "prepared"}
    for r in lines.values():
        assert len(r["runs"]) == 2 and r["first_blocking_s"] > 0 and r["later_blocking_s"] > 0 and r["state_gb"] > 0
        assert r["allocations"] == [1]  # one set of buffers per role, reused by the second save
    assert lines["prepared"]["prepare_background_s"] > 0 and "prepare_background_s" not in lines["at_save"]
    kept = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["variant"] for r in kept] == ["at_save", "prepared"]
