"""The engine's algorithms against verl 0.9.1's own `core_algos` on random inputs (the differential test).

verl is installed for the tests only, without its heavy dependencies (scripts/setup.sh: `pip install --no-deps
verl==0.9.1` plus four light packages). Every estimator, loss aggregation mode, policy loss, KL estimator and the
value loss that both have must agree to float precision; a recipe added to the engine joins this file.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

core_algos = pytest.importorskip(
    "verl.trainer.ppo.core_algos", reason="verl==0.9.1 (the reference) is not installed: run scripts/setup.sh")

import verl
from verl.workers.config.actor import FSDPActorConfig

from engine.algos.advantages import ADV_ESTIMATORS, compute_advantage
from engine.algos.kl import KL_KINDS, STRAIGHT_THROUGH_KINDS, kl_penalty
from engine.algos.logprob import logprobs_and_entropy
from engine.algos.losses import LOSS_AGG_MODES, POLICY_LOSSES, agg_loss, compute_value_loss, get_policy_loss
from engine.workers.loss_weights import micro_batch_weights

ATOL = 1e-5
B, R, GROUP = 12, 10, 4


def test_the_reference_is_verl_0_9_1():
    assert verl.__version__ == "0.9.1"


def _inputs(seed: int, dtype=torch.float64):
    """Random rows of random lengths (at least 1 token), groups of GROUP rows, outcome rewards on the last token,
    dense rewards, values, and log-probs near each other."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, R + 1, (B,), generator=g)
    mask = (torch.arange(R)[None, :] < lengths[:, None]).to(dtype)
    scores = torch.randint(0, 3, (B,), generator=g).to(dtype)  # ties inside groups happen
    outcome = torch.zeros(B, R, dtype=dtype)
    outcome[torch.arange(B), lengths - 1] = scores
    dense = torch.randn(B, R, generator=g, dtype=dtype) * mask
    values = torch.randn(B, R, generator=g, dtype=dtype)
    old = -torch.rand(B, R, generator=g, dtype=dtype) * 3
    new = old + torch.randn(B, R, generator=g, dtype=dtype) * 0.3
    index = np.array([f"p{i // GROUP}" for i in range(B)], dtype=object)
    return {"mask": mask, "outcome": outcome, "dense": dense, "values": values, "old": old, "new": new,
            "index": index, "baselines": torch.randn(B, generator=g, dtype=dtype), "g": g}


SEEDS = [0, 1, 2]


# ---- advantage estimators ----------------------------------------------------------------------------


def _verl_adv(name: str, d, rewards, **kw):
    fn = core_algos.get_adv_estimator_fn(name)
    return fn(token_level_rewards=rewards, response_mask=d["mask"], **kw)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.99, 0.95), (0.5, 0.0)])
def test_gae(seed, gamma, lam):
    d = _inputs(seed)
    ours = compute_advantage("gae", token_level_rewards=d["dense"], response_mask=d["mask"], values=d["values"],
                             gamma=gamma, lam=lam)
    ref = _verl_adv("gae", d, d["dense"], values=d["values"], gamma=gamma, lam=lam)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a * d["mask"], b * d["mask"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name, verl_name, kw", [
    ("grpo", "grpo", {"norm_adv_by_std_in_grpo": True}),
    ("grpo", "grpo", {"norm_adv_by_std_in_grpo": False}),
    ("grpo", "grpo_vectorized", {"norm_adv_by_std_in_grpo": True}),
    ("rloo", "rloo", {}),
    ("rloo", "rloo_vectorized", {}),
    ("reinforce_plus_plus_baseline", "reinforce_plus_plus_baseline", {}),
])
def test_group_estimators(seed, name, verl_name, kw):
    d = _inputs(seed)
    ours = compute_advantage(name, token_level_rewards=d["outcome"], response_mask=d["mask"], index=d["index"], **kw)
    ref = _verl_adv(verl_name, d, d["outcome"], index=d["index"], **kw)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a * d["mask"], b * d["mask"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_plus_plus(seed, gamma):
    from verl.trainer.config import AlgoConfig

    d = _inputs(seed)
    ours = compute_advantage("reinforce_plus_plus", token_level_rewards=d["dense"], response_mask=d["mask"],
                             gamma=gamma)
    ref = _verl_adv("reinforce_plus_plus", d, d["dense"], config=AlgoConfig(gamma=gamma))
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a * d["mask"], b * d["mask"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_remax(seed):
    d = _inputs(seed)
    ours = compute_advantage("remax", token_level_rewards=d["outcome"], response_mask=d["mask"],
                             reward_baselines=d["baselines"])
    ref = _verl_adv("remax", d, d["outcome"], reward_baselines=d["baselines"])
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a * d["mask"], b * d["mask"], atol=ATOL, rtol=0)


def test_every_engine_estimator_is_compared():
    compared = {"gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"}
    assert set(ADV_ESTIMATORS) == compared, "a new estimator must join the differential test"


# ---- loss aggregation: one mini-batch, and the same mini-batch cut into micro-batches ------------------


def _verl_agg(loss, mask, mode, horizon=None):
    return core_algos.agg_loss(loss, mask, mode, loss_scale_factor=horizon)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_agg_loss(seed, mode):
    d = _inputs(seed)
    loss = torch.randn(B, R, generator=d["g"], dtype=torch.float64)
    torch.testing.assert_close(agg_loss(loss, d["mask"], mode), _verl_agg(loss, d["mask"], mode), atol=ATOL, rtol=0)
    torch.testing.assert_close(agg_loss(loss, d["mask"], mode, norm_length=7.0),
                               _verl_agg(loss, d["mask"], mode, horizon=7.0), atol=ATOL, rtol=0)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("micro", [1, 3, 4, B])
def test_agg_loss_over_micro_batches_equals_verl_on_the_mini_batch(mode, micro):
    """The engine weights micro-batches (engine/workers/loss_weights.py); the sum must be verl's global value."""
    d = _inputs(7)
    loss = torch.randn(B, R, generator=d["g"], dtype=torch.float64)
    parts = [(i, min(i + micro, B)) for i in range(0, B, micro)]
    weights = micro_batch_weights([d["mask"][a:b] for a, b in parts], d["mask"], mode)
    total = sum(agg_loss(loss[a:b], d["mask"][a:b], mode, norm_length=R) * w for (a, b), w in zip(parts, weights))
    torch.testing.assert_close(torch.as_tensor(total, dtype=torch.float64), _verl_agg(loss, d["mask"], mode),
                               atol=ATOL, rtol=0)


# ---- policy losses -----------------------------------------------------------------------------------


def _actor_cfg(loss_mode="vanilla", low=0.2, high=0.28, c=3.0):
    """verl's actor config; the loss function is chosen by name, so loss_mode itself is not read."""
    return FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, rollout_n=1,
                           clip_ratio=0.2, clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=c)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("loss_mode", sorted(POLICY_LOSSES))
def test_policy_losses(seed, mode, loss_mode):
    d = _inputs(seed)
    adv = torch.randn(B, R, generator=d["g"], dtype=torch.float64) * d["mask"]
    new_ours = d["new"].clone().requires_grad_(True)
    new_ref = d["new"].clone().requires_grad_(True)
    ours = get_policy_loss(loss_mode)(d["old"], new_ours, adv, d["mask"], clip_ratio_low=0.2, clip_ratio_high=0.28,
                                      clip_ratio_c=3.0, loss_agg_mode=mode)
    ref_loss, ref_metrics = core_algos.get_policy_loss_fn(loss_mode)(
        d["old"], new_ref, adv, d["mask"], loss_agg_mode=mode, config=_actor_cfg(loss_mode))
    torch.testing.assert_close(ours["pg_loss"], ref_loss, atol=ATOL, rtol=0)
    ours["pg_loss"].backward()
    ref_loss.backward()
    torch.testing.assert_close(new_ours.grad, new_ref.grad, atol=ATOL, rtol=0)
    for key in ("pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"):
        assert float(ours[key]) == pytest.approx(ref_metrics[f"actor/{key}"], abs=ATOL), key


def test_rollout_is_weights_multiply_the_policy_loss_as_in_verl():
    d = _inputs(11)
    adv = torch.randn(B, R, generator=d["g"], dtype=torch.float64) * d["mask"]
    weights = torch.rand(B, R, generator=d["g"], dtype=torch.float64) * 2
    for loss_mode in sorted(POLICY_LOSSES):
        ours = get_policy_loss(loss_mode)(d["old"], d["new"], adv, d["mask"], clip_ratio_low=0.2,
                                          clip_ratio_high=0.28, loss_agg_mode="token-mean", rollout_is_weights=weights)
        ref, _ = core_algos.get_policy_loss_fn(loss_mode)(d["old"], d["new"], adv, d["mask"], config=_actor_cfg(
            loss_mode), loss_agg_mode="token-mean", rollout_is_weights=weights)
        torch.testing.assert_close(ours["pg_loss"], ref, atol=ATOL, rtol=0)


# ---- KL, value, entropy ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", [k for k in KL_KINDS if k != "full"] + list(STRAIGHT_THROUGH_KINDS) + ["k2+"])
def test_kl_estimators_values_and_gradients(seed, kind):
    d = _inputs(seed)
    lp_ours = d["new"].clone().requires_grad_(True)
    lp_ref = d["new"].clone().requires_grad_(True)
    ours = kl_penalty(lp_ours, d["old"], kind)
    ref = core_algos.kl_penalty(lp_ref, d["old"], kind)
    torch.testing.assert_close(ours, ref, atol=ATOL, rtol=0)
    (ours * d["mask"]).sum().backward()
    (ref * d["mask"]).sum().backward()
    torch.testing.assert_close(lp_ours.grad, lp_ref.grad, atol=ATOL, rtol=0)


def test_kl_full_is_refused_as_in_verl():
    d = _inputs(0)
    with pytest.raises(NotImplementedError):
        kl_penalty(d["new"], d["old"], "full")
    with pytest.raises(NotImplementedError):
        core_algos.kl_penalty(d["new"], d["old"], "full")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_value_loss(seed, mode):
    d = _inputs(seed)
    vpreds = d["values"] + torch.randn(B, R, generator=d["g"], dtype=torch.float64)
    returns = torch.randn(B, R, generator=d["g"], dtype=torch.float64)
    ours = compute_value_loss(vpreds, returns, d["values"], d["mask"], cliprange_value=0.5, loss_agg_mode=mode)
    ref = core_algos.compute_value_loss(vpreds, returns, d["values"], d["mask"], cliprange_value=0.5,
                                        loss_agg_mode=mode)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(torch.as_tensor(a), torch.as_tensor(b), atol=ATOL, rtol=0)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_entropy_loss(mode):
    d = _inputs(5, dtype=torch.float32)
    logits = torch.randn(B, R, 17, generator=d["g"])
    entropy = logprobs_and_entropy(logits, torch.zeros(B, R, dtype=torch.long))[1]  # the engine's entropy kernel
    ours = agg_loss(entropy, d["mask"], mode)
    ref = core_algos.compute_entropy_loss(logits, d["mask"], mode)
    torch.testing.assert_close(ours, ref, atol=ATOL, rtol=0)


# ---- rollout correction (verl's rollout_corr_helper) -------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS[:1])
@pytest.mark.parametrize("is_level, is_threshold, normalize", [
    (None, None, False), ("token", 2.0, False), ("token", 1.1, True), ("sequence", 2.0, False),
    ("sequence", "0.5_1.5", True), ("token", "0.8_1.25", False)])
@pytest.mark.parametrize("rs, rs_threshold", [
    (None, None), ("token_k1", "0.8_1.25"), ("token_k2", 0.02), ("token_k3", 0.02), ("seq_sum_k1", 2.0),
    ("seq_sum_k3", 0.1), ("seq_mean_k2", 0.01), ("seq_max_k3", 0.05), ("token_k1,seq_mean_k3", "1.5,0.02")])
def test_rollout_correction(seed, is_level, is_threshold, normalize, rs, rs_threshold):
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    from engine.algos.rollout_correction import rollout_correction

    d = _inputs(seed)
    rollout = d["old"] + torch.randn(B, R, generator=d["g"], dtype=torch.float64) * 0.15
    kw = {"rollout_is": is_level, "rollout_is_threshold": is_threshold, "rollout_is_batch_normalize": normalize,
          "rollout_rs": rs, "rollout_rs_threshold": rs_threshold}
    weights, mask, metrics = rollout_correction(d["old"], rollout, d["mask"], **kw)
    ref_weights, ref_mask, ref_metrics = compute_rollout_correction_and_rejection_mask(d["old"], rollout, d["mask"],
                                                                                      **kw)
    torch.testing.assert_close(mask, ref_mask, atol=0, rtol=0)
    if is_level is None:
        assert weights is None and ref_weights is None
    else:
        torch.testing.assert_close(weights, ref_weights.batch["rollout_is_weights"], atol=ATOL, rtol=0)
    assert metrics, "rollout correction reports its metrics"
    for key, value in metrics.items():  # every metric the engine reports is verl's, with verl's value
        assert key in ref_metrics, key
        assert value == pytest.approx(ref_metrics[key], abs=1e-5, rel=1e-6), key
