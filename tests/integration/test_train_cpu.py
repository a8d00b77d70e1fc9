"""The seed-style command on the tiny model with 2 CPU workers (Ray + FSDP2 over gloo): GRPO with a
save / kill -9 / resume across an epoch boundary, the exported HF model and the merged sharded checkpoint; PPO with critic, reference
and KL in the reward."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import base_args, engine_env, run_engine
from tests.waiting import alive, wait_for

HOLD_REWARD = Path(__file__).with_name("hold_reward.py")

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # each test is a whole engine run on 2 Ray workers


def read_metrics(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def read_samples(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line.strip()]


def train_steps(records: list[dict]) -> list[int]:
    return [r["step"] for r in records if "training/global_step" in r["data"]]


def test_grpo_save_kill_resume_at_epoch_boundary_and_export(tiny_model, tmp_path):
    from engine.data.arith import prepare_arith

    data, out = tmp_path / "data", tmp_path / "run"
    # 32 prompts / 16 per step = 2 steps per epoch; checkpoint at step 2 = the end of epoch 1. (Its own small data
    # set: the fewest steps that still put a checkpoint, a kill and a resume across an epoch boundary.)
    prepare_arith(data, train_size=32, test_size=8)
    args = base_args(tiny_model, data, out, **{
        "algorithm.adv_estimator": "grpo", "actor_rollout_ref.actor.use_kl_loss": "True",
        "actor_rollout_ref.rollout.n": 2, "trainer.total_training_steps": 4, "trainer.save_freq": 2,
        "trainer.val_before_train": "False", "trainer.test_freq": 2,  # a validation before the kill and after it
        "custom_reward_function.path": str(HOLD_REWARD),
        # the kill must land after step 2's checkpoint is the resume point, however slow the machine: a blocking
        # save (a background one completes when written; test_async_checkpoint_completes_and_resumes covers it)
        "actor_rollout_ref.actor.checkpoint.async_save": "False"})
    # The first run is held while it scores step 4 (after logging step 3, before step 4 can log or checkpoint
    # anything), so the kill lands at the same point however fast the machine is.
    held = tmp_path / "held"
    env = engine_env() | {"HOLD_AFTER_STEP": "3", "HOLD_MARKER": str(held), "HOLD_METRICS": str(out / "metrics.jsonl")}
    log = tmp_path / "first-run.log"  # a file, not a pipe: a pipe nobody reads would block a chatty run
    with open(log, "w") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "engine.main_ppo", *args], cwd=tmp_path, env=env,
                                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def is_held() -> bool:
            alive(proc, lambda: f"the first run ended before it was held:\n{log.read_text()[-4000:]}")
            return held.exists()

        wait_for(is_held, 600, 0.5, "the first run to be held after step 3")
        assert train_steps(read_metrics(out)) == [1, 2, 3]
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # kill -9 the driver and everything it started
        except ProcessLookupError:
            pass
        proc.wait()
    killed_step3 = sorted(s["prompt_index"] for s in read_samples(out) if s["step"] == 3 and s["split"] == "train")
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert (out / "global_step_2" / "trainer_state.json").exists()

    resumed = run_engine(args, tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resumed" in resumed.stdout
    steps = train_steps(read_metrics(out))
    assert steps == [1, 2, 3, 4], f"steps logged: {steps}"  # no gap, no duplicate
    first = next(r for r in read_metrics(out) if r["step"] == 3)["data"]
    assert first["training/epoch"] == 1  # step 3 is the first batch of the second epoch
    resumed_step3 = sorted(s["prompt_index"] for s in read_samples(out) if s["step"] == 3 and s["split"] == "train")
    assert resumed_step3 == killed_step3  # the same prompts as the uninterrupted order
    assert len(resumed_step3) == 16 * 2

    # every rollout of a step is logged, with its per-token arrays
    step4 = [s for s in read_samples(out) if s["step"] == 4 and s["split"] == "train"]
    assert len(step4) == 32
    for s in step4:
        assert len(s["tokens"]) == len(s["old_log_probs"]) == len(s["ref_log_probs"]) == len(s["advantages"])
        assert s["data_source"] == "arith" and s["ground_truth"] is not None
    groups = {}
    for s in step4:
        groups.setdefault(s["group_uid"], set()).add(s["prompt_index"])
    assert len(groups) == 16 and all(len(v) == 1 for v in groups.values())

    # the exported actor is an ordinary HF model directory
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out / "hf_model")
    tok = AutoTokenizer.from_pretrained(out / "hf_model")
    ids = tok.apply_chat_template([{"role": "user", "content": "12+34=?"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    gen = model.generate(**ids, max_new_tokens=6, do_sample=False)
    assert gen.shape[1] > ids["input_ids"].shape[1]

    # the last checkpoint, sharded over 2 workers, merges into the same model (engine.model_merger's command, run in
    # this process: tests/integration/test_model_merger.py runs it as `python -m engine.model_merger`)
    from engine.model_merger.__main__ import main as model_merger

    assert model_merger(["merge", "--backend", "fsdp", "--local_dir", str(out / "global_step_4" / "actor"),
                         "--target_dir", str(tmp_path / "merged")]) == 0
    import torch

    with torch.no_grad():
        ids = torch.randint(0, model.config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(0))
        assert torch.equal(AutoModelForCausalLM.from_pretrained(tmp_path / "merged")(ids).logits, model(ids).logits)


def test_ppo_with_critic_reference_and_kl_in_reward(tiny_model, arith_data, tmp_path):
    out = tmp_path / "ppo"
    args = base_args(tiny_model, arith_data, out, **{
        "critic.optim.lr": "1e-5", "critic.ppo_micro_batch_size_per_gpu": 4,
        "algorithm.kl_ctrl.kl_coef": "0.001", "trainer.total_training_steps": 2, "trainer.test_freq": 2,
        "trainer.val_before_train": "False",  # the validation after step 2 gives the val-core metric checked below
        "actor_rollout_ref.rollout.n": 1, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
        "trainer.profile_steps": "[2]", "trainer.default_local_dir": "ppo"})  # relative: profiles go to ppo/profile
    result = run_engine(args, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "roles=actor+rollout+reference+critic" in result.stdout
    # the run's facts count the critic's parameters beside the actor's: all of them train (no LoRA)
    counts = dict(re.findall(r" (critic_n_params|critic_n_trainable_params)=(\d+)", result.stdout))
    assert len(counts) == 2 and counts["critic_n_params"] == counts["critic_n_trainable_params"], result.stdout[:3000]
    assert "Critic Loss" in result.stdout and "KL" in result.stdout
    records = read_metrics(out)
    assert train_steps(records) == [1, 2]
    last = records[-1]["data"]
    for key in ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/vf_explained_var",
                "critic/values/mean", "critic/advantages/mean", "critic/returns/mean", "critic/score/mean",
                "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/grad_norm",
                "actor/lr", "actor/reward_kl_penalty", "actor/reward_kl_penalty_coeff", "response_length/mean",
                "response_length/clip_ratio", "prompt_length/mean", "timing_s/gen", "timing_s/ref",
                "timing_s/values", "timing_s/old_log_prob", "timing_s/update_actor", "timing_s/update_critic",
                "timing_per_token_ms/gen", "perf/throughput", "perf/time_per_step", "training/global_step",
                "val-core/arith/reward/mean@1"):
        assert key in last, f"missing metric {key}"
    assert last["actor/reward_kl_penalty_coeff"] == pytest.approx(0.001)
    samples = [s for s in read_samples(out) if s["step"] == 2 and s["split"] == "train"]
    assert len(samples) == 16
    assert all(len(s["values"]) == len(s["tokens"]) == len(s["ref_log_probs"]) for s in samples)
    # trainer.profile_steps=[2]: every worker phase of step 2 (none of step 1) profiled on both ranks
    profiles = out / "profile"
    assert sorted(p.name for p in profiles.iterdir()) == ["step_2"]
    for phase in ("gen", "ref", "values", "old_log_prob", "update_critic", "update_actor"):
        for rank in (0, 1):
            table = (profiles / "step_2" / f"{phase}_rank{rank}.txt").read_text()
            assert "Self CPU" in table and "aten::" in table, f"{phase} rank {rank}: {table[:300]}"
            assert (profiles / "step_2" / f"{phase}_rank{rank}.json.gz").stat().st_size > 1000
    assert "aten::mm" in (profiles / "step_2" / "update_actor_rank0.txt").read_text()
