"""The async modes' driver (trainer.v1.trainer_mode = colocate_async | separate_async): a rollout thread generates
the next batches on the behaviour policy (a copy of the actor on each worker, engine/workers/behaviour/) while the
trainer updates on the current one. The design and what is not built yet: engine/trainer/ASYNC.md.

Producer (`RolloutAhead`, its own thread): for step t it pulls the prompts, waits until it may start (at most
`ahead` batches beyond the step the trainer asked for, and version t - 1 - ahead published), generates with exactly
that version and stamps every token with it. Consumer (`AsyncBatches`, the batch source the trainer holds in the
async modes; engine/trainer/batches.py): the trainer's step takes each batch from the producer instead of generating,
and the actor's weights are published after each update. With ahead = 0 (max_off_policy_threshold = 1) the producer
only runs while the trainer waits: the sync trainer's order. With DAPO's filter (algorithm.filter_groups), and
wherever failed groups are refilled (engine/trainer/failed_groups.py: without carry-over), the producer also scores
each batch, evicts the groups without a learning signal or with a failed reward and refills from the loader's next
prompts on the same version, with the sync trainer's functions (batches.Scorer, group_selection.keep_groups).
With carry-over (trainer.v1.carry_over_groups, carry.py) the producer keeps more groups in flight than a batch and
forms each step's batch from the first to complete; the others carry on into the next step's round.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from engine.protocol import Batch
from engine.reward.manager import RewardResult
from engine.rollout import versions
from engine.trainer import failed_groups
from engine.trainer.asynchronous import staleness
from engine.trainer.asynchronous.carry import CarryFeeder
from engine.trainer.batches import Scorer, group_prompts, select_groups
from engine.trainer.group_selection import Selection
from engine.trainer.heartbeat import Heartbeat
from engine.trainer.roles import StepLog


@dataclass
class Produced:
    prompts: Batch  # as the loader gave them (the trainer's loop reads their epoch)
    loader_state: dict  # the loader's state before these prompts: a checkpoint resumes by reissuing them (and any
    # refill pulled after them: they are all pulled before the step is trained)
    batch: Batch | None = None  # the generated answers, once done
    log: StepLog = field(default_factory=StepLog)  # the generation's worker metrics (and when scored here the
    # scoring's and the eviction's timings, counts and metrics), for the trainer's step log
    reward: RewardResult | None = None  # scored here (select), else None: the trainer's step scores
    evicted: list = field(default_factory=list)  # the evicted groups (group_selection.Evicted)
    version: int = -1  # the version it started on (partial rollout: later tokens may be newer)
    started_s: float = 0.0  # the producer's clock around its generation, seconds since the run started
    ended_s: float = 0.0


class _Stopped(Exception):
    """The trainer stopped the producer in the middle of a step's refills."""


class RolloutAhead:
    """The producer thread and the hand-over, under one condition variable (no sleeps, no polling)."""

    def __init__(self, loader, ahead: int, start_step: int, generate, clock, select=None,
                 carry: CarryFeeder | None = None):
        """`generate(prompts, step, version)` -> (the prompts' answers on exactly that version, the workers' metrics);
        `clock()`: seconds since the run started; `select(batch, log, step, more)` -> Selection: scores a batch and
        keeps its groups, `more(count)` generating refills (DAPO's dynamic sampling, failed groups; None: the
        trainer's step scores); `carry`: carry-over's pool of groups in flight beyond the batch (carry.py)."""
        self.loader, self.ahead, self.generate, self.clock, self.select = loader, ahead, generate, clock, select
        self.carry = carry
        self.start_version = start_step  # the weights at start: the actor after start_step updates
        self.cond = threading.Condition()
        self.items: dict[int, Produced] = {}  # step -> its batch (pulled, then generated)
        self.requested = start_step  # the last step the trainer asked for
        self.published = start_step - 1  # the newest version published to the behaviour policy
        self.error: BaseException | None = None
        self.stopping = False
        # what the producer is doing now, for the trainer's heartbeat (wait_rollout): (what, step, version, since)
        self.activity: tuple[str, int, int, float] = ("starting", start_step + 1, start_step, time.time())
        self.thread = threading.Thread(target=self._run, name="rlstudio-rollout-ahead", daemon=True)

    def version_for(self, step: int) -> int:
        """The exact weights step `step`'s batch is generated with: `ahead` versions behind on-policy."""
        return max(self.start_version, step - 1 - self.ahead)

    # ---- the trainer's side (main thread) ------------------------------------------------------------
    def publish(self, version: int) -> None:
        with self.cond:
            self.published = max(self.published, version)
            self.cond.notify_all()

    def prompts(self, step: int) -> Produced:
        """Ask for step `step`'s batch; returns once its prompts are pulled (the answers may still be coming)."""
        with self.cond:
            self.requested = max(self.requested, step)
            self.cond.notify_all()
            self._wait(lambda: step in self.items)
            return self.items[step]

    def take(self, step: int) -> Produced:
        """Step `step`'s generated batch (waits for it); it leaves the producer's books."""
        with self.cond:
            self._wait(lambda: step in self.items and self.items[step].batch is not None)
            return self.items.pop(step)

    def loader_state(self) -> dict:
        """The loader's state as training has consumed it: before the oldest batch not yet trained."""
        with self.cond:
            pending = sorted(self.items)
            if pending:
                return dict(self.items[pending[0]].loader_state)
            return self.carry.state() if self.carry is not None else self.loader.state_dict()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join()

    def state(self) -> str:
        """One line naming what the producer is doing or waiting for (a hung wait_rollout says where)."""
        with self.cond:
            what, step, version, since = self.activity
            if self.error is not None:
                what = f"failed: {type(self.error).__name__}"
        return f"rollout {what}: step {step} on version {version}, for {time.time() - since:.1f} s"

    def _doing(self, what: str, step: int, version: int) -> None:
        with self.cond:
            self.activity = (what, step, version, time.time())
            self.cond.notify_all()  # (a test waits for a state, never a timer)

    def _wait(self, ready) -> None:
        while not ready():
            if self.error is not None:
                raise RuntimeError(f"the rollout thread failed: {type(self.error).__name__}: {self.error}") \
                    from self.error
            if not self.thread.is_alive():
                raise RuntimeError("the rollout thread stopped before producing the batch asked for")
            self.cond.wait()

    # ---- the producer (its own thread) ---------------------------------------------------------------
    def _run(self) -> None:
        step = self.requested + 1
        try:
            while True:
                version = self.version_for(step)
                self._doing(f"waiting for the trainer's request (at most {self.ahead} ahead) and version {version}",
                            step, version)
                with self.cond:
                    while not self.stopping and not (staleness.may_start(step, version, self.ahead)
                                                     and self.requested >= step - self.ahead
                                                     and self.published >= version):
                        self.cond.wait()
                    if self.stopping:
                        return
                    if self.carry is not None:  # the pool topped up (stale groups evicted first)
                        state, evicted = self.carry.pull(step)
                        item = Produced(self.carry.placeholder(), state, version=version)
                    else:
                        state = self.loader.state_dict()
                        item = Produced(next(self.loader), state, version=version)
                    self.items[step] = item
                    self.cond.notify_all()
                started = self.clock()
                if self.carry is not None:
                    self._doing("generating (carry-over round)", step, version)
                    with item.log.phase("gen"):
                        batch = self.carry.round(step, version, item.log, evicted)
                else:
                    batch = self._generate(item, step, 1)
                reward, evicted = None, []
                if self.select is not None:  # the sync trainer's order: generate, score, evict; refill until full
                    selection = self.select(batch, item.log, step, _Refill(self, item, step))
                    batch, reward, evicted = selection.batch, selection.reward, selection.evicted
                with self.cond:
                    item.batch, item.reward, item.evicted = batch, reward, evicted
                    item.started_s, item.ended_s = started, self.clock()
                    self.cond.notify_all()
                step += 1
        except _Stopped:
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer, which raises it with the cause
            with self.cond:
                self.error = exc
                self.cond.notify_all()

    def _generate(self, item: Produced, step: int, generation: int, prompts: Batch | None = None) -> Batch:
        """One generation for step `step` on exactly the item's version (`generation` > 1: a refill)."""
        self._doing("generating" if generation == 1 else f"generating (refill, generation {generation})",
                    step, item.version)
        with item.log.phase("gen"):
            batch, metrics = self.generate(item.prompts if prompts is None else prompts, step, item.version)
        item.log.add_worker_metrics(metrics)
        if versions.KEY not in batch.tensors:  # a worker that did not stamp: one version throughout
            batch.tensors[versions.KEY] = versions.stamp(batch["responses"], item.version)
        batch.info["global_step"] = step
        return batch


class _Refill:
    """keep_groups' `more(count)` for one step's batch in the producer: the loader's next prompts (the first `count`
    of them, when given), generated on the same version (`select` scores them). They are pulled under the lock while
    the step's item is still pending, so a checkpoint's loader state (before the oldest pending item's first prompts)
    reissues them too."""

    def __init__(self, producer: RolloutAhead, item: Produced, step: int):
        self.producer, self.item, self.step, self.generation = producer, item, step, 1

    def __call__(self, count: int | None = None) -> Batch:
        producer = self.producer
        with producer.cond:
            if producer.stopping:  # unlimited refills (max_num_gen_batches <= 0) must not outlive the run
                raise _Stopped
            prompts = failed_groups.first_prompts(next(producer.loader), count)
        self.generation += 1
        return producer._generate(self.item, self.step, self.generation, prompts)


class AsyncBatches:
    """The async modes' batch source (engine/trainer/batches.py has the interface): each step's batch as the rollout
    thread generated it on the behaviour copy, its weights published after the step's update. The rollout thread
    starts with the first step's prompts, after any resume (its weights are then the first version)."""
    is_async = True

    def __init__(self, cfg, loader, wg, scorer: Scorer, heartbeat: Heartbeat, selects: bool):
        self.cfg, self.loader, self.wg, self.scorer, self.heartbeat, self.selects = (cfg, loader, wg, scorer,
                                                                                     heartbeat, selects)
        self.settings = staleness.AsyncSettings.from_config(cfg)
        self.producer: RolloutAhead | None = None
        self.taken: Produced | None = None  # the step's batch as the producer handed it over
        self.timeline: dict[str, float] = {}
        self.run_start = time.time()  # the timeline/* metrics' zero: both threads read this wall clock
        v1 = cfg.trainer.v1
        self.partial_chunk = int(v1.partial_rollout_chunk) if v1.partial_rollout else 0
        self.reissue: list = []  # set by a resume: carry-over's prompts in flight at the checkpoint
        # no run-ahead: the rollout generates only while the workers wait, so each shares one random stream with its
        # rollout process (separate_async)
        self.wg.all_call("behaviour_init", shared_stream=self.settings.ahead == 0)

    def clock(self) -> float:
        """Seconds since the run started, on the wall clock (the same for the producer's and the trainer's spans)."""
        return time.time() - self.run_start

    # ---- the producer's collaborators (its thread) ---------------------------------------------------------------
    def generate(self, prompts: Batch, step: int, version: int) -> tuple[Batch, dict]:
        """Step `step`'s answers to `prompts` on exactly `version`. Partial rollout: later chunks may switch to any
        version the trainer of step `step` allows, i.e. up to its own weights (step - 1)."""
        grouped = group_prompts(prompts, self.cfg.actor_rollout_ref.rollout.n, step)
        partial = {"newest": step - 1, "chunk": self.partial_chunk} if self.partial_chunk else {}
        return self.wg.dp_call("behaviour_generate", grouped, version=version, **partial)

    def select(self, batch: Batch, log: StepLog, step: int, more) -> Selection:
        """DAPO's filter / failed groups in the rollout thread: score, evict, refill on the same version."""
        batch, reward = self.scorer(batch, log)
        selection = select_groups(self.cfg, batch, reward, lambda count=None: self.scorer(more(count), log), step,
                                  sync=False)
        log.metrics.update(selection.metrics)
        return selection

    # ---- the trainer's side (main thread) -------------------------------------------------------------------------
    def prompts(self, step: int) -> Batch:
        if self.producer is None:  # first batch, after any resume: the weights now are the first version
            v1 = self.cfg.trainer.v1
            carry = CarryFeeder(self.cfg, self.loader, self.wg, self.settings, v1.carry_over_groups,
                                v1.partial_rollout_chunk, self.reissue) if v1.carry_over_groups else None
            self.producer = RolloutAhead(self.loader, self.settings.ahead, step - 1, self.generate, self.clock,
                                         select=self.select if self.selects else None, carry=carry)
            self.wg.all_call("behaviour_publish", step - 1)
            self.producer.publish(step - 1)
            self.producer.thread.start()
        return self.producer.prompts(step).prompts

    def scored(self, prompts: Batch, step: int, log: StepLog) -> Selection:
        with log.phase("gen"):  # the wait for the rollout's batch (verl's timing_s/gen)
            batch = self._take(step, log)
        if self.taken.reward is None:  # not scored in the rollout thread: scored here, as the sync trainer does
            return Selection(*self.scorer(batch, log))
        return Selection(batch, self.taken.reward, self.taken.evicted)

    def _take(self, step: int, log: StepLog) -> Batch:
        # a phase of its own inside `gen`: a run hung here names the producer's state (generating which step on
        # which version, or waiting for what) instead of a bare `gen`
        self.heartbeat.enter("wait_rollout", step, detail=self.producer.state())
        waited = time.perf_counter()
        item = self.taken = self.producer.take(step)
        self.timeline = {"timeline/rollout_start_s": item.started_s, "timeline/rollout_end_s": item.ended_s,
                         "timeline/train_start_s": self.clock()}
        log.metrics["timing_s/wait_rollout"] = time.perf_counter() - waited
        _merge(log, item.log)
        batch = item.batch
        batch.info["global_step"] = step
        oldest, _ = versions.trajectory_versions(batch[versions.KEY], batch["response_mask"])
        stale = staleness.stale_groups(step, oldest.tolist(), self.settings.threshold)
        if stale:  # the producer's gate makes this impossible; evicting and refilling comes with partial rollout
            raise RuntimeError(f"step {step}: {len(stale)} trajectories are older than "
                               f"trainer.v1.sampler.max_off_policy_threshold={self.settings.threshold}")
        return batch

    def after_update(self, step: int) -> dict[str, float]:
        """The actor after step `step`'s update is version `step`: the rollout may now use it. The dashboard's
        timeline: this step's batch's generation (the producer's clock) and its training (from the batch's hand-over
        to the publication of the new weights); seconds since the run started."""
        published = self.wg.all_call("behaviour_publish", step)
        self.producer.publish(step)
        return {"timing_s/update_weights": max(m["timing_s/update_weights"] for m in published),
                **self.timeline, "timeline/train_end_s": self.clock()}

    # ---- checkpoints: the loader's state of what was trained (a resume reissues the prompts still in flight) -----
    def state_dict(self) -> dict:
        return self.producer.loader_state() if self.producer is not None else self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if self.producer is not None:
            raise RuntimeError("the loader's state can only be loaded before the rollout thread starts")
        self.loader.load_state_dict(state)
        self.reissue = list(state.get("reissue") or [])  # carry-over's prompts in flight at the checkpoint

    def close(self) -> None:
        if self.producer is not None:
            self.producer.stop()


def _merge(log: StepLog, produced: StepLog) -> None:
    """The producer's record of a batch into the trainer's step log. Its `gen` is the generation's own time; the
    step's `gen` stays the trainer's wait for the batch (verl's timing_s/gen), as without the filter."""
    log.add_worker_metrics(produced.worker)
    log.metrics.update(produced.metrics)
    for name, count in produced.counts.items():
        log.counts[name] += count
    for name, seconds in produced.timings.items():
        if name != "gen":
            log.timings[name] = log.timings.get(name, 0.0) + seconds
