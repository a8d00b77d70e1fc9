"""The async trainer's pure parts: per-token policy versions and verl's off-policy metrics, the staleness rules
(verl's age, how far the rollout may run ahead, which groups drop) and their eviction counts."""
from __future__ import annotations

import pytest
import torch

from engine.rollout.versions import off_policy_metrics, stamp, trajectory_versions
from engine.trainer.asynchronous.staleness import AsyncSettings, age, eviction_metrics, may_start, stale_groups


def test_a_sync_step_is_one_version_and_zero_staleness():
    responses = torch.zeros(4, 5, dtype=torch.long)
    mask = torch.tensor([[1, 1, 1, 0, 0]] * 4)
    m = off_policy_metrics(stamp(responses, 6), mask, step=7)  # step 7 trains on version 6
    assert m["training/off_policy/trajectory_spans/mean"] == m["training/off_policy/trajectory_spans/max"] == 1.0
    for name in ("trajectory_staleness", "trajectory_staleness_worst"):
        for stat in ("mean", "max", "min"):
            assert m[f"training/off_policy/{name}/{stat}"] == 0.0


def test_spans_and_staleness_of_mixed_trajectories_follow_verl():
    # row 0: versions 2,2,3 (a weight update mid-answer); row 1: all 1; padding carries versions that must not count
    versions = torch.tensor([[2, 2, 3, 9], [1, 1, 9, 9]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    oldest, newest = trajectory_versions(versions, mask)
    assert oldest.tolist() == [2, 1] and newest.tolist() == [3, 1]
    m = off_policy_metrics(versions, mask, step=5)  # current version 4
    assert m["training/off_policy/trajectory_spans/max"] == 2 and m["training/off_policy/trajectory_spans/min"] == 1
    assert m["training/off_policy/trajectory_spans/mean"] == 1.5
    assert (m["training/off_policy/trajectory_staleness/min"], m["training/off_policy/trajectory_staleness/max"]) == (1, 3)
    assert m["training/off_policy/trajectory_staleness/mean"] == 2.0
    assert (m["training/off_policy/trajectory_staleness_worst/min"],
            m["training/off_policy/trajectory_staleness_worst/max"]) == (2, 3)


def test_a_row_without_response_tokens_counts_the_version_asked():
    versions = torch.tensor([[3, 3], [5, 5]])
    mask = torch.tensor([[0, 0], [1, 0]])
    assert trajectory_versions(versions, mask)[0].tolist() == [3, 5]


def test_age_is_verls_prompt_age():
    assert age(trained_step=5, oldest_version=4) == 1  # on-policy
    assert age(trained_step=5, oldest_version=2) == 3


@pytest.mark.parametrize("ahead, target, version, ok", [
    (0, 3, 2, True), (0, 3, 1, False),  # strict: step 3's batch waits for version 2 (the sync order)
    (1, 3, 1, True), (1, 3, 0, False), (2, 5, 2, True),
])
def test_the_rollout_starts_a_batch_only_within_reach(ahead, target, version, ok):
    assert may_start(target, version, ahead) is ok


def test_ahead_is_capped_below_the_threshold():
    s = AsyncSettings("colocate_async", threshold=1, strategy="drop", warmup=3, sync_every=1)
    assert s.ahead == 0  # threshold 1 = on-policy, whatever the warmup
    assert AsyncSettings("colocate_async", 8, "drop", 1, 1).ahead == 1
    assert AsyncSettings("colocate_async", 3, "wait", 5, 1).ahead == 2


def test_stale_groups_and_their_eviction_counts():
    assert stale_groups(6, [5, 2, 4, 1], threshold=3) == [1, 3]  # ages 1, 4, 2, 5
    m = eviction_metrics(6, [2, 1])
    assert m == {"training/off_policy/evicted_samples": 2.0,
                 "training/off_policy/evicted_samples_staleness/mean": 4.5,
                 "training/off_policy/evicted_samples_staleness/max": 5.0,
                 "training/off_policy/evicted_samples_staleness/min": 4.0}
    assert eviction_metrics(6, []) == {}
