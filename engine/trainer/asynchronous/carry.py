"""Carry-over of slow groups in the async modes (`trainer.v1.sampler.carry_over_groups` > 0; ASYNC.md "Carry-over").

The rollout keeps more prompt groups in flight than a batch needs: the batch's B plus `carry_over_groups`. A round
(one per step, on the step's version) generates chunks of tokens for every answer still running until B groups are
complete; the batch is the first B groups to complete (ties: the order they were pulled), and the others carry into
the next round with their tokens, behaviour log-probs and versions, continuing from prompt + tokens so far on the
next round's weights (the prefix recomputed, as partial rollout does). A step thus no longer waits for its longest
answers. Before a round, per `max_off_policy_strategy` (verl's v1 sampler):
- drop: groups whose age at this step would exceed the threshold are evicted (verl's evicted_samples metrics) and
  one new prompt refills each;
- wait: groups that could not wait another step (their age at the next step would exceed it) must finish in this
  round and are trained first; while such a group is pending no new prompt starts beyond the batch's B.

Everything here is bookkeeping on the driver (pure tensors, no model): a round's chunks go to the workers as plain
generation calls on the continuation batch (`continuation`), so the workers hold no state between chunks.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

import torch

from engine.data.dataset import collate
from engine.protocol import Batch
from engine.rollout import versions
from engine.rollout.hf_rollout import assemble
from engine.trainer.asynchronous import staleness
from engine.trainer.batches import group_prompts

PROMPT_KEYS = ("input_ids", "attention_mask", "position_ids")


@dataclass
class Group:
    """One prompt's rollout.n answers, as far as they are generated."""
    order: int  # pull order: breaks ties between groups that complete in the same chunk
    rows: Batch  # the prompt rows (rollout.n, one uid) as batches.group_prompts made them
    source: tuple[int, int]  # (epoch, dataset row) of the prompt: a checkpoint reissues it from there
    tokens: torch.Tensor  # [n, L] answer tokens so far (pad after each answer's length)
    log_probs: torch.Tensor  # [n, L] behaviour log-probs of those tokens
    versions: torch.Tensor  # [n, L] the policy version of each token
    lengths: torch.Tensor  # [n] tokens so far
    ended: torch.Tensor  # [n] bool: answered (end token, or the response length reached)
    first_version: int | None = None  # the version of its first tokens (its age when trained: step - this)
    done_at: tuple[int, int] | None = None  # (round, chunk) in which its last answer ended

    @property
    def complete(self) -> bool:
        return bool(self.ended.all())

    def age(self, step: int) -> int | None:
        return None if self.first_version is None else staleness.age(step, self.first_version)


def new_group(order: int, rows: Batch, source: tuple[int, int], length: int, pad_id: int) -> Group:
    n = len(rows)
    return Group(order, rows, source, torch.full((n, length), pad_id, dtype=torch.long),
                 torch.zeros(n, length, dtype=torch.float32), torch.zeros(n, length, dtype=torch.long),
                 torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.bool))


@dataclass
class CarryPool:
    """The groups in flight and the rules that form each step's batch from them."""
    batch_groups: int  # B: groups per trained batch (data.train_batch_size)
    extra: int  # carry_over_groups: groups in flight beyond B
    threshold: int  # max_off_policy_threshold
    strategy: str  # drop | wait
    groups: list[Group] = field(default_factory=list)
    pulled: int = 0  # groups ever pulled (the next one's order)

    # ---- before a round -------------------------------------------------------------------------------
    def evict_stale(self, step: int) -> list[Group]:
        """drop: remove (and return) the groups whose age at `step` is over the threshold. wait: none."""
        if self.strategy != "drop":
            return []
        stale = [g for g in self.groups if (a := g.age(step)) is not None and a > self.threshold]
        self.groups = [g for g in self.groups if g not in stale]
        return stale

    def must_finish(self, step: int) -> list[Group]:
        """wait: the groups that would be over the threshold at the next step, so must be trained at `step`."""
        if self.strategy != "wait":
            return []
        return [g for g in self.groups if (a := g.age(step + 1)) is not None and a > self.threshold]

    def wanted(self, step: int) -> int:
        """How many new groups to pull before the round of `step`: up to B + extra in flight, or only up to B while
        a group that must finish is pending (wait: sampling blocks)."""
        target = self.batch_groups if self.must_finish(step) else self.batch_groups + self.extra
        return max(0, target - len(self.groups))

    def add(self, group: Group) -> None:
        self.groups.append(group)
        self.pulled = max(self.pulled, group.order + 1)

    # ---- during a round ----------------------------------------------------------------------------------
    def running(self) -> list[tuple[Group, int]]:
        """(group, row) of every answer still running, groups in pull order."""
        return [(g, int(r)) for g in self.groups for r in torch.nonzero(~g.ended).flatten()]

    def ready(self, step: int) -> bool:
        """Can step `step`'s batch be formed: B groups complete, including every group that must finish."""
        done = sum(g.complete for g in self.groups)
        return done >= self.batch_groups and all(g.complete for g in self.must_finish(step))

    def apply(self, rows: list[tuple[Group, int]], tokens: torch.Tensor, log_probs: torch.Tensor,
              counts: torch.Tensor, ended: torch.Tensor, version: int, when: tuple[int, int]) -> None:
        """A chunk's output for `rows` (in the order `continuation` was given them): `counts[i]` new tokens of row i
        (`tokens[i, :counts[i]]`, their log-probs), `ended[i]` whether its answer ended in this chunk."""
        for i, (g, r) in enumerate(rows):
            start = int(g.lengths[r])
            room = g.tokens.shape[1] - start
            k = min(int(counts[i]), room)
            g.tokens[r, start:start + k] = tokens[i, :k].cpu()
            g.log_probs[r, start:start + k] = log_probs[i, :k].float().cpu()
            g.versions[r, start:start + k] = version
            g.lengths[r] = start + k
            if g.first_version is None:
                g.first_version = version
            if bool(ended[i]) or start + k >= g.tokens.shape[1]:
                g.ended[r] = True
        for g in {id(g): g for g, _ in rows}.values():
            if g.done_at is None and g.complete:
                g.done_at = when

    # ---- after a round -------------------------------------------------------------------------------
    def take(self, step: int) -> list[Group]:
        """Step `step`'s B groups, removed from the pool: those that must finish first, then the first to complete
        (ties in pull order)."""
        forced = {id(g) for g in self.must_finish(step)}
        complete = [g for g in self.groups if g.complete]
        complete.sort(key=lambda g: (id(g) not in forced, g.done_at, g.order))
        taken = complete[:self.batch_groups]
        ids = {id(g) for g in taken}
        self.groups = [g for g in self.groups if id(g) not in ids]
        return taken

    def sources(self) -> list[tuple[int, int]]:
        """The prompts in flight, in pull order: a checkpoint saves them and a resume reissues them first."""
        return [g.source for g in sorted(self.groups, key=lambda g: g.order)]


def left_pad(rows: Batch, width: int, pad_id: int) -> dict[str, torch.Tensor]:
    """A left-padded prompt block widened to `width` columns (more padding on the left; positions kept)."""
    ids, mask, pos = (rows[k] for k in PROMPT_KEYS)
    extra = width - ids.shape[1]
    if extra <= 0:
        return {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
    n = ids.shape[0]
    return {"input_ids": torch.cat([torch.full((n, extra), pad_id, dtype=ids.dtype), ids], dim=1),
            "attention_mask": torch.cat([torch.zeros(n, extra, dtype=mask.dtype), mask], dim=1),
            "position_ids": torch.cat([torch.zeros(n, extra, dtype=pos.dtype), pos], dim=1)}


def continuation(rows: list[tuple[Group, int]], pad_id: int) -> Batch:
    """The running answers as prompts to continue: each row's prompt (without its padding) followed by its tokens so
    far, left-padded to the longest, positions counting the real tokens (the layout the prompts came in)."""
    seqs = []
    for g, r in rows:
        mask = g.rows["attention_mask"][r].bool()
        seqs.append(torch.cat([g.rows["input_ids"][r][mask].cpu(), g.tokens[r, :int(g.lengths[r])]]))
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s):] = s
        mask[i, width - len(s):] = 1
    return Batch({"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)})


def assemble_groups(groups: list[Group], pad_id: int) -> tuple[Batch, torch.Tensor, torch.Tensor]:
    """The taken groups as one batch of prompts (left-padded to a common width, meta kept) and their answers:
    (prompts, responses [rows, L], response_mask); the log-probs and versions are concatenated alike by the caller."""
    width = max(g.rows["input_ids"].shape[1] for g in groups)
    parts = []
    for g in groups:
        padded = left_pad(g.rows, width, pad_id)
        parts.append(Batch(padded, dict(g.rows.meta), dict(g.rows.info)))
    prompts = Batch.concat(parts)
    lengths = torch.cat([g.lengths for g in groups])
    length = groups[0].tokens.shape[1]
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).long()
    tokens = torch.cat([g.tokens for g in groups])
    responses = torch.where(mask.bool(), tokens, torch.full_like(tokens, pad_id))
    return prompts, responses, mask


def run_round(pool: CarryPool, step: int, version: int, chunk: int, generate, pad_id: int, round_index: int) -> int:
    """Generate chunks of `chunk` tokens on `version` until step `step`'s batch can be formed; returns how many.
    `generate(continuation_batch, max_new_tokens)` -> a batch with `responses`, `rollout_log_probs`,
    `response_mask` ([rows, <= chunk], end token included) and `ended` ([rows] bool)."""
    chunks = 0
    while not pool.ready(step):
        rows = pool.running()
        if not rows:  # fewer than B groups in flight: the caller pulls at least B, so this is a bug, said as one
            raise RuntimeError(f"carry-over: step {step}'s batch needs {pool.batch_groups} complete groups, the pool "
                               f"has {sum(g.complete for g in pool.groups)} and nothing running")
        out = generate(continuation(rows, pad_id), chunk)
        pool.apply(rows, out["responses"], out["rollout_log_probs"], out["response_mask"].sum(-1), out["ended"],
                   version, (round_index, chunks))
        chunks += 1
    return chunks


class CarryFeeder:
    """The rollout thread's side of carry-over: the prompts not yet pulled into the pool (the loader's batches split
    into prompts, the reissued ones of a resume first), the pool, and each step's round. Checkpoints: the loader's
    state after every prompt pulled so far, plus `reissue`, the (epoch, dataset row) of each prompt pulled and not
    yet trained (in flight or queued), which a resume pulls first, as verl reissues its pending and running groups."""

    def __init__(self, cfg, loader, wg, settings: staleness.AsyncSettings, extra: int, chunk: int,
                 reissue: list | None = None):
        """`wg`: the worker group the rounds' chunks are generated on (behaviour_generate)."""
        self.loader, self.wg, self.chunk = loader, wg, int(chunk)
        self.n = int(cfg.actor_rollout_ref.rollout.n)
        self.pool = CarryPool(cfg.data.train_batch_size, int(extra), settings.threshold, settings.strategy)
        self.length = int(cfg.actor_rollout_ref.rollout.response_length)
        self.pad_id = int(loader.dataset.pad_token_id)
        self.epoch = loader.epoch
        self.rounds = 0
        self.queue: collections.deque[tuple[Batch, tuple[int, int]]] = collections.deque(
            (self._prompt_at(int(e), int(row)), (int(e), int(row))) for e, row in (reissue or []))

    def state(self) -> dict:
        pending = self.pool.sources() + [source for _, source in self.queue]
        return {**self.loader.state_dict(), "reissue": [list(source) for source in pending]}

    def pull(self, step: int) -> tuple[dict, list[Group]]:
        """Before step `step`'s round (under the producer's lock, as a checkpoint reads the state): evict what is too
        stale (drop), top the pool up; returns the state a checkpoint made before this step's batch resumes from
        (every prompt in flight reissued) and the evicted groups."""
        evicted = self.pool.evict_stale(step)
        for _ in range(self.pool.wanted(step)):
            prompt, source = self._next_prompt()
            rows = group_prompts(prompt, self.n, step)
            self.pool.add(new_group(self.pool.pulled, rows, source, self.length, self.pad_id))
        return self.state(), evicted

    def placeholder(self) -> Batch:
        """What the trainer's loop gets as the step's prompts: only the epoch (the batch is formed by the round)."""
        return Batch(info={"epoch": self.epoch})

    def round(self, step: int, version: int, log, evicted: list[Group]) -> Batch:
        """Step `step`'s batch: chunks on `version` until it can be formed, then the first groups to complete."""
        def generate(batch: Batch, max_new: int) -> Batch:
            out, metrics = self.wg.dp_call("behaviour_generate", batch, version=version, max_new_tokens=max_new)
            log.add_worker_metrics(metrics)
            return out

        chunks = run_round(self.pool, step, version, self.chunk, generate, self.pad_id, self.rounds)
        self.rounds += 1
        taken = self.pool.take(step)
        prompts, responses, mask = assemble_groups(taken, self.pad_id)
        batch = assemble(prompts, responses, [], self.pad_id, response_mask=mask)
        batch.tensors["rollout_log_probs"] = torch.cat([g.log_probs for g in taken]) * mask
        batch.tensors[versions.KEY] = torch.cat([g.versions for g in taken])
        batch.info["global_step"] = step
        log.metrics.update(staleness.eviction_metrics(step, [g.first_version for g in evicted
                                                             if g.first_version is not None]))
        left = self.pool.groups
        log.metrics.update({"rollout/carry_chunks": float(chunks), "rollout/carried_groups": float(len(left)),
                            "rollout/carried_tokens": float(sum(int(g.lengths.sum()) for g in left))})
        return batch

    def _next_prompt(self) -> tuple[Batch, tuple[int, int]]:
        if not self.queue:
            batch = next(self.loader)
            epoch, index = int(batch.info.get("epoch", 0)), int(batch.info.get("batch_in_epoch", 0))
            size = len(batch)
            rows = self.loader.order(epoch)[index * self.loader.batch_size:index * self.loader.batch_size + size]
            self.epoch = epoch
            for j in range(size):
                one = batch.index([j])
                self.queue.append((one, (epoch, int(rows[j]))))
        return self.queue.popleft()

    def _prompt_at(self, epoch: int, row: int) -> Batch:
        prompt = collate([self.loader.dataset[row]], self.loader.dataset.pad_token_id, self.loader.pad_to)
        prompt.info.update(epoch=epoch)
        return prompt
