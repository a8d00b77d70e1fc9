"""LoRA (verl's `*.model.lora_rank` & co.): the config accepts verl's keys and refuses other LoRA options by name;
a LoRA actor in a real worker trains only its adapter, its reference is the base model (the actor's module with
the adapter off, no second copy), step 1's log-probs equal the base model's (B starts at zero), the rollout
samples from base + adapter after every update (transformers' generate and the static decoder), and a checkpoint
resumes the adapter exactly."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import ConfigError, build_config
from tests.integration.helpers import base_args, run_engine

PROBE = Path(__file__).with_name("lora_probe.py")
ROOT = Path(__file__).resolve().parents[2]


def test_verl_lora_keys_are_accepted_and_other_lora_options_refused_by_name():
    cfg = build_config(["actor_rollout_ref.model.lora_rank=64", "actor_rollout_ref.model.lora_alpha=32",
                        "actor_rollout_ref.model.target_modules=[q_proj,v_proj]",
                        "actor_rollout_ref.model.exclude_modules=o_proj", "critic.model.lora_rank=8",
                        "actor_rollout_ref.rollout.layered_summon=True"])
    assert cfg.actor_rollout_ref.model.lora_rank == 64 and cfg.actor_rollout_ref.model.target_modules == ["q_proj",
                                                                                                          "v_proj"]
    assert cfg.critic.model.lora_rank == 8
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.model\.lora_dropout.*lora_rank, lora_alpha"):
        build_config(["+actor_rollout_ref.model.lora_dropout=0.1"])
    with pytest.raises(ConfigError, match=r"lora_rank"):
        build_config(["actor_rollout_ref.model.lora_rank=-1"])


@pytest.mark.parametrize("decode", ["generate", "static"])
def test_lora_actor_trains_the_adapter_the_reference_is_the_base_and_the_rollout_follows(
        decode, tiny_model, arith_data, tmp_path):
    # with transformers' generate the run is PPO with a LoRA critic too
    extra = ["algorithm.adv_estimator=gae", "critic.model.lora_rank=8",
             "critic.ppo_micro_batch_size_per_gpu=8", "critic.optim.lr=0.05"] if decode == "generate" else []
    run = subprocess.run([sys.executable, str(PROBE), tiny_model, str(arith_data), str(tmp_path), decode, *extra],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    line = next((ln for ln in run.stdout.splitlines() if ln.startswith("PROBE ")), None)
    assert line, f"probe failed (exit {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    r = json.loads(line[len("PROBE "):])
    # only the adapter trains, and AdamW holds state for it alone
    assert 0 < r["n_trainable"] < r["n_params"] / 10 and r["optimizer_params"] == r["n_trainable"]
    assert r["reference_is_actor_module"]  # no second copy of the weights
    # step 1: B = 0, so the adapter changes nothing: actor == base (the reference) in fp32
    assert r["step1_actor_vs_ref"] < 1e-6
    if decode == "static":  # the static decoder binds merged weights (W + scale · B A) of its own
        assert r["step1_rollout_vs_actor"] < 1e-4
    # the update moved the adapter, not the base; the rollout samples from the updated weights
    assert r["after_update_actor_moved"] > 1e-2 and r["after_update_ref_moved"] == 0.0
    if decode == "static":
        assert r["after_update_rollout_vs_actor"] < 1e-4
    if decode == "generate":
        assert r["critic_values_moved"] > 1e-3 and 0 < r["critic_trainable_share"] < 0.2
        # the run's facts (the run page) count the critic's trainable and total parameters too
        trainable, total = r["critic_facts"]
        assert 0 < trainable < total and trainable / total == pytest.approx(r["critic_trainable_share"])
    else:  # no critic: no critic counts
        assert r["critic_facts"] == [None, None]
    # the checkpoint holds the adapter and its optimizer state, not the base, and brings them back exactly
    assert r["checkpoint_share_of_full_state"] < 0.2
    assert r["resumed_actor_vs_saved"] < 1e-6 and r["resumed_ref_vs_saved"] < 1e-6


@pytest.mark.ray
@pytest.mark.slow
def test_lora_grpo_with_a_reference_runs_on_two_workers(tiny_model, arith_data, tmp_path):
    """Two workers shard each decoder layer as its own FSDP2 unit; peft's generate runs the wrapped model, not the
    root, which FSDP2 refused before the root's first forward ("already been lazily initialized")."""
    out = tmp_path / "run"
    run = run_engine(base_args(tiny_model, arith_data, out, **{
        "actor_rollout_ref.model.lora_rank": 8, "actor_rollout_ref.actor.use_kl_loss": "True",
        "algorithm.adv_estimator": "grpo", "trainer.total_training_steps": 2, "trainer.val_before_train": "False",
        "actor_rollout_ref.actor.ppo_mini_batch_size": 16}),  # one mini-batch: step 1's update is all on-policy
        cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    first = next(r["data"] for r in steps if r["step"] == 1 and "actor/kl_loss" in r["data"])
    assert abs(first["actor/kl_loss"]) < 1e-6  # the reference (adapter off) equals the actor at step 1
