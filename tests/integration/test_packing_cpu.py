"""use_remove_padding on a real run: PPO with critic and reference, every model pass packed (actor update with
token-budget micro-batches, old log-probs, reference, critic values and update) on 2 CPU workers."""
from __future__ import annotations

import pytest

from tests.integration.helpers import base_args, run_engine
from tests.integration.test_train_cpu import read_metrics, train_steps

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # a whole engine run


def test_ppo_packed_matches_the_rollout(tiny_model, arith_data, tmp_path):
    out = tmp_path / "packed"
    args = base_args(tiny_model, arith_data, out, **{
        "actor_rollout_ref.model.use_remove_padding": "True", "critic.model.use_remove_padding": "True",
        # the static decoder reports the sampled tokens' log-probs: the actor's packed recomputation must agree
        "+actor_rollout_ref.rollout.engine_kwargs.hf.decode": "static",
        "actor_rollout_ref.actor.use_dynamic_bsz": "True", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 96,
        "critic.use_dynamic_bsz": "True", "critic.ppo_max_token_len_per_gpu": 96,
        "critic.optim.lr": "1e-5", "algorithm.kl_ctrl.kl_coef": "0.001", "actor_rollout_ref.rollout.n": 2,
        "trainer.total_training_steps": 2, "trainer.val_before_train": "False", "trainer.test_freq": -1})
    result = run_engine(args, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "roles=actor+rollout+reference+critic" in result.stdout
    records = read_metrics(out)
    assert train_steps(records) == [1, 2]
    for record in records:
        data = record["data"]
        # fp32 on CPU: the rollout and the packed actor compute the same log-probs up to rounding
        assert data["actor/rollout_log_probs_absdiff"] < 1e-5, data["actor/rollout_log_probs_absdiff"]
        for key in ("critic/vf_loss", "critic/values/mean", "actor/pg_loss", "actor/grad_norm", "critic/grad_norm"):
            assert key in data and data[key] == data[key], key  # present and not NaN
        assert data["actor/grad_norm"] > 0 and data["critic/grad_norm"] > 0
