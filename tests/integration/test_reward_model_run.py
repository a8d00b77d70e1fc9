"""reward_model.enable=True: a run trains against a tiny reward model (verl's kind: a token-classification head
with one label) that the workers load and run with their own micro-batch and max-length keys; the scores the
trainer used are those of the same model run directly on the same texts."""
from __future__ import annotations

import json
import re

import pytest

from tests.integration.helpers import base_args

MAX_LENGTH = 17  # the tiny prompts are ~14 tokens: answers are cut (verl's right truncation keeps the start)


def rm_args(reward_model: str, **extra) -> dict:
    return {"algorithm.adv_estimator": "grpo", "data.train_batch_size": 8, "actor_rollout_ref.rollout.n": 2,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 8, "trainer.total_training_steps": 2,
            "trainer.val_before_train": "False", "trainer.test_freq": 2, "data.val_max_samples": 8,
            "reward_model.enable": "True", "reward_model.model.path": reward_model,
            "reward_model.micro_batch_size_per_gpu": 3, "reward_model.max_length": MAX_LENGTH, **extra}


def check_scores(out, reward_model: str, cut_matters: bool = True) -> list[dict]:
    """Every logged answer's rm_score is the reward model's own score of its text, and its reward is the rule
    score (0 or 1) plus that; returns the samples."""
    from engine.reward.reward_model import RewardModelScorer

    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line.strip()]
    assert {s["split"] for s in samples} == {"train", "val"}
    direct = RewardModelScorer(reward_model, max_length=MAX_LENGTH).score(
        [s["prompt"] for s in samples], [s["response"] for s in samples])
    assert [s["rm_score"] for s in samples] == pytest.approx(direct, abs=1e-5)
    for s in samples:
        assert s["score"] - s["rm_score"] == pytest.approx(round(s["score"] - s["rm_score"]), abs=1e-5)
        assert round(s["score"] - s["rm_score"]) in (0, 1)
    if not cut_matters:
        return samples
    # max_length was applied: uncut, some of these texts score differently (the seeded in-process run writes
    # answers long enough; another placement samples other answers, which may all fit)
    uncut = RewardModelScorer(reward_model).score([s["prompt"] for s in samples], [s["response"] for s in samples])
    assert max(abs(a - b) for a, b in zip(uncut, direct)) > 1e-3
    return samples


def test_training_uses_the_reward_models_scores(tiny_model, arith_data, tiny_reward_model, tmp_path):
    from engine import train

    out = tmp_path / "run"
    result = train(base_args(tiny_model, arith_data, out, **rm_args(tiny_reward_model, **{
        "trainer.n_gpus_per_node": 1})))
    assert result.global_step == 2
    samples = check_scores(out, tiny_reward_model)
    train_rows = [s for s in samples if s["split"] == "train"]
    assert len(train_rows) == 32
    step2 = [s["score"] for s in train_rows if s["step"] == 2]
    assert result.metrics[2]["critic/score/mean"] == pytest.approx(sum(step2) / len(step2), abs=1e-5)


@pytest.mark.slow
@pytest.mark.ray
def test_reward_model_sharded_over_two_ray_workers(tiny_model, arith_data, tiny_reward_model, tmp_path):
    """The same run through `python -m engine.main_ppo` on two Ray workers: the reward model is FSDP2-sharded
    over both (each scores its half of the batch) and the logged scores are still the model's own."""
    from tests.integration.helpers import run_engine

    out = tmp_path / "run"
    result = run_engine(base_args(tiny_model, arith_data, out, **rm_args(tiny_reward_model)), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"started workers=2 .*roles=actor\+rollout\+reward_model .*launcher=ray", result.stdout), \
        result.stdout[-2000:]
    samples = check_scores(out, tiny_reward_model, cut_matters=False)
    assert len([s for s in samples if s["split"] == "train"]) == 32
