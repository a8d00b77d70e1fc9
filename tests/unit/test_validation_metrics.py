"""The engine's validation statistics (engine/trainer/validation_metrics.py) against verl 0.9.1's own
`process_validation_metrics` on the same inputs: every statistic of every data source and variable, equal."""
from __future__ import annotations

import numpy as np
import pytest

from engine.trainer.validation_metrics import (
    flat_validation_metrics,
    majority_values,
    prompt_stats,
    subset_sizes,
    validation_metrics,
    validation_stats,
)

metric_utils = pytest.importorskip(
    "verl.trainer.ppo.metric_utils", reason="verl==0.9.1 (the reference) is not installed: run scripts/setup.sh")


def _inputs(seed: int, n: int, prompts: int = 5, with_pred: bool = True, with_none: bool = False):
    """Interleaved answers (n per prompt, two data sources), a 0/1 `acc`, a graded `reward`, answers to vote on
    drawn from few values (so ties and majorities both happen), and a text column verl skips."""
    rng = np.random.default_rng(seed)
    rows = prompts * n
    sources = [("openai/gsm8k" if (i // n) % 2 == 0 else "arith") for i in range(rows)]
    uids = [f"val-{i // n}" for i in range(rows)]
    columns = {"reward": rng.integers(0, 3, rows).astype(float).tolist(),
               "acc": rng.integers(0, 2, rows).astype(bool).tolist(),
               "text": [f"t{i}" for i in range(rows)]}
    if with_pred:
        columns["pred"] = [str(x) for x in rng.integers(0, 3, rows)]
    if with_none:
        columns["acc"][0] = None  # verl drops it: prompt 0 has n-1 acc values and no votes for acc
    return sources, uids, columns


def _assert_same(ours, ref):
    ref = {s: {v: dict(m) for v, m in vars_.items()} for s, vars_ in ref.items()}
    assert ours.keys() == ref.keys()
    for source in ref:
        assert ours[source].keys() == ref[source].keys(), source
        for var in ref[source]:
            assert ours[source][var].keys() == ref[source][var].keys(), (source, var)
            for stat, value in ref[source][var].items():
                assert ours[source][var][stat] == pytest.approx(float(value), rel=1e-12, abs=1e-12), (source, var, stat)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("seed", [0, 1])
def test_equals_verl(n, seed):
    sources, uids, columns = _inputs(seed, n)
    ours = validation_stats(sources, uids, columns)
    ref = metric_utils.process_validation_metrics(sources, uids, columns)
    _assert_same(ours, ref)
    if n > 1:  # the statistics the issue names are all there, maj included
        stats = ours["arith"]["acc"]
        for k in subset_sizes(n):
            for name in ("best", "worst", "maj"):
                assert {f"{name}@{k}/mean", f"{name}@{k}/std"} <= stats.keys()
        assert {f"mean@{n}", f"std@{n}"} <= stats.keys()


@pytest.mark.parametrize("n", [4, 6])
def test_equals_verl_without_votes_and_with_missing_values(n):
    sources, uids, columns = _inputs(3, n, with_pred=False, with_none=True)
    ours = validation_stats(sources, uids, columns)
    _assert_same(ours, metric_utils.process_validation_metrics(sources, uids, columns))
    assert not any(stat.startswith("maj") for stat in ours["openai/gsm8k"]["reward"])


def test_the_global_random_state_is_left_alone():
    """verl reseeds numpy's global RNG; ours draws from a private one, so a seeded run's data order is unchanged."""
    np.random.seed(7)
    expected = np.random.rand()
    np.random.seed(7)
    prompt_stats([0.0, 1.0, 1.0, 0.0])
    assert np.random.rand() == expected


def test_majority_ties_go_to_the_vote_drawn_first():
    values = np.array([1.0, 0.0, 0.5])
    votes = np.array([0, 1, 1])
    draws = np.array([[0, 1], [1, 0], [1, 2], [2, 0]])  # tie, tie, votes (1,1), tie
    # the value returned is that of the first drawn answer with the winning vote
    assert majority_values(values, votes, draws).tolist() == [1.0, 0.0, 0.0, 0.5]


def test_subset_sizes():
    assert [subset_sizes(n) for n in (1, 2, 3, 4, 5, 8, 9)] == [[], [2], [2, 3], [2, 4], [2, 4, 5], [2, 4, 8],
                                                                [2, 4, 8, 9]]


def test_flat_names_keep_the_n1_key_and_follow_verls_sections():
    # n = 1 (the default val_kwargs.n): the key the backend, UI and tests already read
    assert validation_metrics(["openai/gsm8k", "openai/gsm8k"], ["a", "b"], [1.0, 0.0]) == {
        "val-core/openai/gsm8k/reward/mean@1": 0.5}
    # n = 4 with votes: val-core holds the core variable's mean/maj/best at N only (their std too, as in verl)
    sources, uids = ["s"] * 8, ["a"] * 4 + ["b"] * 4
    flat = validation_metrics(sources, uids, [1, 0, 1, 1, 0, 0, 0, 1], {"pred": list("xyxxzzzy")})
    core = sorted(k for k in flat if k.startswith("val-core/"))
    assert core == ["val-core/s/reward/best@4/mean", "val-core/s/reward/best@4/std", "val-core/s/reward/maj@4/mean",
                    "val-core/s/reward/maj@4/std", "val-core/s/reward/mean@4"]
    assert {"val-aux/s/reward/std@4", "val-aux/s/reward/best@2/mean", "val-aux/s/reward/worst@4/std",
            "val-aux/s/reward/maj@2/std"} <= flat.keys()
    assert flat["val-core/s/reward/mean@4"] == 0.5
    assert flat["val-core/s/reward/maj@4/mean"] <= flat["val-core/s/reward/best@4/mean"] <= 1.0
    # a reward returning `acc` makes acc the core variable (verl's DAPO recipe); reward moves to val-aux
    flat = validation_metrics(["s"] * 2, ["a"] * 2, [0.5, -0.5], {"acc": [1.0, 0.0]})
    assert sorted(k for k in flat if k.startswith("val-core/")) == ["val-core/s/acc/best@2/mean",
                                                                   "val-core/s/acc/best@2/std", "val-core/s/acc/mean@2"]
    assert flat["val-aux/s/reward/mean@2"] == 0.0


def test_flat_names_equal_verls_sections():
    """The val-core / val-aux split of `RayPPOTrainer._val_metrics_update` (its rule, applied to verl's own
    statistics; ray_trainer itself needs packages the tests do not install)."""
    sources, uids, columns = _inputs(5, 8)
    ref = metric_utils.process_validation_metrics(sources, uids, columns)
    expected = {}
    for source, var2metric in ref.items():
        core_var = "acc" if "acc" in var2metric else "reward"
        for var, metric2val in var2metric.items():
            n_max = max(int(name.split("@")[-1].split("/")[0]) for name in metric2val)
            for name, value in metric2val.items():
                core = var == core_var and name.split("@")[0] in ("mean", "maj", "best") and f"@{n_max}" in name
                expected[f"{'val-core' if core else 'val-aux'}/{source}/{var}/{name}"] = value
    ours = flat_validation_metrics(validation_stats(sources, uids, columns))
    assert ours.keys() == expected.keys()
    assert all(ours[k] == pytest.approx(float(v), rel=1e-12) for k, v in expected.items())
