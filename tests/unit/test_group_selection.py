"""Group selection (engine/trainer/group_selection.py) as a pure function: scored batches in, the kept groups, the
evicted ones and verl's counts out, refills asked of `more` exactly as needed. No model, tokenizer or trainer."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from engine.protocol import Batch
from engine.reward.manager import RewardResult
from engine.trainer.failed_groups import MAX_GEN_BATCHES, METRIC
from engine.trainer.group_selection import keep_groups

OFF = SimpleNamespace(enable=False, metric=None, max_num_gen_batches=0)


def dapo(limit: int = 0):
    return SimpleNamespace(enable=True, metric="score", max_num_gen_batches=limit)


def scored(groups: dict[str, list[float]], failed: dict[int, str] | None = None) -> tuple[Batch, RewardResult]:
    """A scored batch: each group's rows with their scores (the row index is the `row` tensor, to follow rows)."""
    uids = [uid for uid, scores in groups.items() for _ in scores]
    scores = [s for group in groups.values() for s in group]
    rows = len(uids)
    batch = Batch({"row": torch.arange(rows), "token_level_scores": torch.tensor(scores).unsqueeze(1)},
                  {"uid": np.array(uids, dtype=object)})
    return batch, RewardResult(torch.tensor(scores).unsqueeze(1), scores, {}, [f"r{i}" for i in range(rows)],
                               dict(failed or {}))


def refills(*batches):
    """`more(count)` handing out `batches` in turn; `asked` records each call's count."""
    queue, asked = list(batches), []

    def more(count=None):
        asked.append(count)
        return queue.pop(0)

    return more, asked


def test_nothing_to_evict_returns_the_batch_as_generated_with_no_metrics():
    batch, reward = scored({"a": [1, 0], "b": [1, 1]})
    more, asked = refills()
    kept = keep_groups(batch, reward, more, want=2, rollout_n=2, filter_groups=OFF, step=3, sync=True)
    assert kept.batch is batch and kept.reward is reward
    assert kept.evicted == [] and kept.metrics == {} and asked == []


def test_a_failed_group_is_evicted_and_exactly_the_missing_groups_refilled():
    batch, reward = scored({"a": [1, 0], "b": [1, 1]}, failed={1: "boom"})
    more, asked = refills(scored({"c": [0, 1]}))
    kept = keep_groups(batch, reward, more, want=2, rollout_n=2, filter_groups=OFF, step=3, sync=True)
    assert asked == [1]
    assert list(kept.batch["uid"]) == ["b", "b", "c", "c"] and not kept.reward.failed
    assert len(kept.evicted) == 1 and kept.evicted[0].failed
    assert kept.evicted[0].batch["row"].tolist() == [0, 1] and kept.evicted[0].reward.failed == {1: "boom"}
    assert kept.metrics == {"train/num_gen_batches": 2, "train/kept_group_fraction": 2 / 3, METRIC: 1}


def test_dapo_evicts_groups_without_signal_refills_whole_batches_and_cuts_the_surplus():
    batch, reward = scored({"a": [1, 1], "b": [1, 0]})
    more, asked = refills(scored({"c": [0, 0], "d": [0, 1], "e": [1, 0]}))
    kept = keep_groups(batch, reward, more, want=2, rollout_n=2, filter_groups=dapo(), step=1, sync=True)
    assert asked == [None]  # a whole loader batch
    assert list(kept.batch["uid"]) == ["b", "b", "d", "d"] and kept.reward.scores == [1, 0, 0, 1]
    assert [(e.failed, list(e.batch["uid"])) for e in kept.evicted] == [(False, ["a", "a"]), (False, ["c", "c"])]
    assert kept.metrics == {"train/num_gen_batches": 2, "train/kept_group_fraction": 3 / 5,
                            "training/filter_groups/evicted_samples": 2,
                            "training/filter_groups/discarded_surplus_samples": 1}


def test_failed_and_no_signal_groups_of_one_batch_are_evicted_in_that_order():
    batch, reward = scored({"a": [1, 0], "b": [1, 1], "c": [0, 1]}, failed={0: "boom"})
    more, _ = refills(scored({"d": [1, 0]}))
    kept = keep_groups(batch, reward, more, want=2, rollout_n=2, filter_groups=dapo(), step=1, sync=True)
    assert [(e.failed, list(e.batch["uid"])) for e in kept.evicted] == [(True, ["a", "a"]), (False, ["b", "b"])]
    assert list(kept.batch["uid"]) == ["c", "c", "d", "d"]
    assert kept.metrics[METRIC] == 1 and kept.metrics["training/filter_groups/evicted_samples"] == 1


def test_failures_that_persist_stop_at_the_bound_with_the_first_error():
    batch, reward = scored({"a": [1, 0]}, failed={0: "first"})
    later = [scored({f"g{i}": [1, 0]}, failed={1: f"later {i}"}) for i in range(MAX_GEN_BATCHES)]
    more, asked = refills(*later)
    with pytest.raises(RuntimeError, match="First failure: first") as err:
        keep_groups(batch, reward, more, want=1, rollout_n=2, filter_groups=OFF, step=4, sync=False)
    assert len(asked) == MAX_GEN_BATCHES - 1
    assert "step 4" in str(err.value) and "always, in the async modes" in str(err.value)


def test_dapos_generation_limit_stops_a_batch_that_never_fills():
    batch, reward = scored({"a": [1, 1]})
    more, asked = refills(scored({"b": [0, 0]}), scored({"c": [0, 0]}))
    with pytest.raises(RuntimeError, match="max_num_gen_batches=2"):
        keep_groups(batch, reward, more, want=1, rollout_n=2, filter_groups=dapo(limit=2), step=1, sync=True)
    assert asked == [None]
