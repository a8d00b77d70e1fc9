"""Failed groups (verl V1's `failure` group status): a group is failed when the reward function raised (or returned
something unusable) for any of its answers. Where they are refilled (always in the async modes; in sync with
trainer.v1.sampler.sync_refill_failed_groups=True) the reward manager marks failed rows instead of raising, and the
trainer evicts their groups and refills from the loader's next prompts (group_selection.keep_groups). Elsewhere the reward
function's error fails the run, as before. Pure functions; the loop is the trainer's."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.config.resolve import world_size
from engine.config.trainer_mode import is_async

# Generation batches one step may take while groups keep failing, when DAPO's own limit
# (algorithm.filter_groups.max_num_gen_batches) does not apply: without a bound a reward function that always
# raises would refill forever.
MAX_GEN_BATCHES = 10
METRIC = "training/rollout_failure/evicted_samples"  # verl V1's count of evicted failed groups


def refills_failed_groups(cfg) -> bool:
    """Whether the run evicts and refills failed groups (else the reward function's error fails the run)."""
    if not is_async(cfg):
        return bool(cfg.trainer.v1.sampler.sync_refill_failed_groups)
    # not built: carry-over's pool (groups span steps), and scoring with the sharded reward model in the rollout
    # thread (its collectives would interleave with the update's; engine/config/trainer_mode.py refuses that too)
    return not cfg.trainer.v1.carry_over_groups and not (cfg.reward_model.enable and world_size(cfg) > 1)


def first_prompts(prompts, count: int | None):
    """A refill's prompts: exactly the `count` missing groups from the loader's next batch (the rest of that batch is
    skipped, as DAPO's surplus is), or the whole batch when `count` is None (DAPO's refills)."""
    if count is None:
        return prompts
    return prompts.index(list(range(min(count, len(prompts)))))


def rows_without_failures(failed: dict[int, str], uids: Sequence[Any]) -> tuple[list[int], set]:
    """(the rows of groups with no failed answer, the uids of the failed groups)."""
    uids = list(uids)
    bad = {uids[row] for row in failed}
    return [row for row, uid in enumerate(uids) if uid not in bad], bad


def limit_error(first: str, failed_groups: int, num_gen: int, kept: int, want: int, step: int, sync: bool,
                limit: int, limit_key: str | None) -> RuntimeError:
    """The run stops: failures persisted through `num_gen` generation batches and the batch is still short."""
    bound = f"{limit_key}={limit}" if limit_key else f"a fixed bound of {limit}"
    opt = (" (trainer.v1.sampler.sync_refill_failed_groups=True; set it to False to fail on the first error)"
           if sync else " (always, in the async modes)")
    return RuntimeError(
        f"step {step}: the reward function failed for {failed_groups} group(s) over {num_gen} generation batches "
        f"({bound}), and only {kept} of data.train_batch_size={want} groups scored without error. Failed groups are "
        f"evicted and refilled{opt}, but they keep failing. First failure: {first} — fix the reward function "
        "(custom_reward_function.path / .name) so that it returns a number for every answer.")
