"""The async driver's hand-over (engine/trainer/asynchronous/driver.py, RolloutAhead) against a worker group that
records what it was asked: which exact version each step's batch is generated with, that the rollout never runs
further ahead than allowed, the loader state a checkpoint keeps, and that a rollout failure reaches the trainer
with its cause. Every wait is for a state (the producer's condition variable), none for a timer."""
from __future__ import annotations

import threading

import pytest
import torch

from engine.protocol import Batch
from engine.rollout.versions import KEY
from engine.trainer.asynchronous.driver import RolloutAhead
from engine.trainer.group_selection import Selection


class Loader:
    def __init__(self):
        self.position = 0

    def __next__(self):
        self.position += 1
        return Batch({"input_ids": torch.full((2, 3), self.position)}, info={"epoch": 0})

    def state_dict(self):
        return {"position": self.position}


class Group:
    """Generates instantly; records (step, version, the step the trainer had asked for) per call."""

    def __init__(self, producer_box, fail_at=None):
        self.calls, self.box, self.fail_at = [], producer_box, fail_at
        self.go = threading.Event()  # cleared: each generation holds until the test lets it go
        self.go.set()
        self.hold_at = None  # a call number: only that generation holds on `go`

    def dp_call(self, method, batch, version):
        assert method == "behaviour_generate"
        step = batch.info["global_step"]
        self.calls.append((step, version, self.box[0].requested))
        if self.hold_at in (None, len(self.calls)):
            self.go.wait()
        if step == self.fail_at:
            raise ValueError(f"planted failure at step {step}")
        return (Batch({"responses": batch["input_ids"], "response_mask": torch.ones_like(batch["input_ids"]),
                       "input_ids": batch["input_ids"]}), {"n": [1.0]})


class Source:
    """The batch source's side of the producer (AsyncBatches): its generation goes to the recording group."""

    def __init__(self, fail_at=None):
        self.box = [None]
        self.wg = Group(self.box, fail_at)

    def clock(self):
        return 0.0

    def generate(self, prompts, step, version):
        grouped = Batch(dict(prompts.tensors), dict(prompts.meta), {**prompts.info, "global_step": step})
        return self.wg.dp_call("behaviour_generate", grouped, version=version)


class Filtering(Source):
    """DAPO's filter as the producer drives it: scoring gives each batch its loader position as the reward, and the
    filter asks `more()` for refills[step] further batches (None: until the producer stops)."""

    def __init__(self, refills):
        super().__init__()
        self.refills = refills

    def score(self, batch, log):
        log.counts["groups"] += 1
        return [int(batch["input_ids"][0, 0])]

    def select(self, batch, log, step, more):
        positions, wanted = self.score(batch, log), self.refills.get(step, 0)
        while wanted is None or len(positions) <= wanted:
            batch = more()
            positions += self.score(batch, log)
        log.metrics["train/num_gen_batches"] = len(positions)
        return Selection(batch, positions, [{"step": step, "dropped": "algorithm.filter_groups: no learning signal"}])


def _producer(ahead, fail_at=None, start_step=0, trainer=None):
    trainer = trainer or Source(fail_at)
    producer = RolloutAhead(Loader(), ahead=ahead, start_step=start_step, generate=trainer.generate,
                            clock=trainer.clock, select=trainer.select if isinstance(trainer, Filtering) else None)
    trainer.box[0] = producer
    producer.publish(start_step)
    producer.thread.start()
    return producer, trainer


def _train_steps(producer, steps, start_step=0):
    """The trainer's side: ask, take, 'update', publish — as AsyncBatches does."""
    taken = []
    for step in range(start_step + 1, start_step + steps + 1):
        producer.prompts(step)
        item = producer.take(step)
        taken.append((step, item.version, int(item.batch[KEY].unique().item())))
        producer.publish(step)
    return taken


def _trained(ahead, steps, start_step=0):
    """A producer `ahead` batches ahead, `steps` steps trained through it, stopped: (what was taken, the trainer)."""
    producer, trainer = _producer(ahead=ahead, start_step=start_step)
    try:
        return _train_steps(producer, steps, start_step=start_step), trainer
    finally:
        producer.stop()


def test_strict_generates_each_batch_on_request_with_the_newest_weights():
    taken, trainer = _trained(ahead=0, steps=4)
    assert taken == [(1, 0, 0), (2, 1, 1), (3, 2, 2), (4, 3, 3)]  # on-policy: step t on version t - 1
    # each batch started only once the trainer asked for its step: the sync trainer's order
    assert all(asked >= step for step, _, asked in trainer.wg.calls)


def test_one_ahead_uses_exactly_the_version_one_behind():
    taken, trainer = _trained(ahead=1, steps=4)
    assert taken == [(1, 0, 0), (2, 0, 0), (3, 1, 1), (4, 2, 2)]
    assert all(asked >= step - 1 for step, _, asked in trainer.wg.calls)  # never more than one batch ahead


def test_after_a_resume_the_first_versions_are_the_resumed_weights():
    taken, _ = _trained(ahead=2, steps=3, start_step=5)
    assert taken == [(6, 5, 5), (7, 5, 5), (8, 5, 5)]


def test_the_loader_state_is_before_the_oldest_batch_not_trained():
    producer, _ = _producer(ahead=1)
    try:
        producer.prompts(1)
        producer.take(1)
        producer.publish(1)
        producer.prompts(2)  # pulled (the loader has moved past it)
        assert producer.loader_state() == {"position": 1}  # a resume pulls step 2's prompts again
        producer.take(2)
        producer.prompts(3)
        assert producer.loader_state() == {"position": 2}
    finally:
        producer.stop()


def test_a_rollout_failure_reaches_the_trainer_with_its_cause():
    producer, _ = _producer(ahead=1, fail_at=2)
    try:
        producer.prompts(1)
        producer.take(1)
        producer.publish(1)
        with pytest.raises(RuntimeError, match="rollout thread failed: ValueError: planted failure at step 2") as err:
            producer.prompts(2)
            producer.take(2)
        assert isinstance(err.value.__cause__, ValueError)
    finally:
        producer.stop()
    assert not producer.thread.is_alive()


def test_stop_ends_a_producer_waiting_for_weights():
    producer, _ = _producer(ahead=0)
    producer.prompts(1)
    producer.take(1)
    producer.stop()  # it waits for step 2's request and version 1, which never come
    assert not producer.thread.is_alive()


def test_the_producer_state_names_what_the_trainer_waits_on():
    """What the trainer's wait_rollout heartbeat carries: the rollout generating which step on which version, or
    waiting for the trainer and the weights."""
    trainer = Source()
    trainer.wg.go.clear()  # the first generation holds
    producer = RolloutAhead(Loader(), ahead=0, start_step=0, generate=trainer.generate, clock=trainer.clock)
    trainer.box[0] = producer
    producer.publish(0)
    producer.thread.start()
    try:
        producer.prompts(1)
        with producer.cond:
            producer.cond.wait_for(lambda: producer.activity[0] == "generating")
        assert producer.state().startswith("rollout generating: step 1 on version 0, for ")
        trainer.wg.go.set()
        producer.take(1)
        with producer.cond:  # step 2 needs the trainer's request and version 1, neither of which has come
            producer.cond.wait_for(lambda: producer.activity[1] == 2)
        assert producer.state().startswith("rollout waiting for the trainer's request (at most 0 ahead) and "
                                           "version 1: step 2 on version 1, for ")
    finally:
        producer.stop()


def test_the_heartbeat_detail_reaches_the_loggers_that_take_it():
    from engine.loggers.tracking import Tracking
    from engine.trainer.heartbeat import Heartbeat

    class WithDetail:
        def __init__(self):
            self.seen = []

        def log_phase(self, phase, step, detail=None):
            self.seen.append((phase, step, detail))

    class Plain:
        def __init__(self):
            self.seen = []

        def log_phase(self, phase, step):
            self.seen.append((phase, step))

    rich, plain = WithDetail(), Plain()
    beat = Heartbeat(Tracking([rich, plain]))
    beat.enter("gen", 2)
    beat.enter("wait_rollout", 2, detail="rollout generating: step 2 on version 1, for 0.5 s")
    assert rich.seen == [("gen", 2, None), ("wait_rollout", 2, "rollout generating: step 2 on version 1, for 0.5 s")]
    assert plain.seen == [("gen", 2), ("wait_rollout", 2)]


def test_dapo_refills_pull_more_prompts_on_the_same_version_and_a_checkpoint_reissues_them_all():
    producer, trainer = _producer(ahead=1, trainer=Filtering({2: 2}))  # step 2 needs two refills
    try:
        assert _train_steps(producer, 1) == [(1, 0, 0)]
        with producer.cond:  # step 2, one ahead: its first prompts and both refills pulled and generated
            producer.cond.wait_for(lambda: 2 in producer.items and producer.items[2].batch is not None)
        # the loader is at 4, but a checkpoint now must reissue all three of step 2's pulls
        assert producer.loader_state() == {"position": 1}
        item = producer.take(2)
        assert item.reward == [2, 3, 4] and item.version == 0  # every refill on step 2's exact version
        assert [call[:2] for call in trainer.wg.calls[1:4]] == [(2, 0), (2, 0), (2, 0)]
        assert item.log.metrics["train/num_gen_batches"] == 3 and item.log.counts["groups"] == 3
        assert item.evicted == [{"step": 2, "dropped": "algorithm.filter_groups: no learning signal"}]
        assert len(item.log.worker["n"]) == 3  # each generation's worker metrics, for the step's log
        producer.publish(2)
        assert producer.loader_state() == {"position": 4}  # step 2 trained: step 3 starts after its refills
    finally:
        producer.stop()


def test_stop_ends_a_producer_refilling_without_limit():
    trainer = Filtering({1: None})  # max_num_gen_batches <= 0 and no group with a signal: refills without end
    trainer.wg.hold_at = 3  # the second refill holds until the test lets it go
    trainer.wg.go.clear()
    producer, _ = _producer(ahead=0, trainer=trainer)
    producer.prompts(1)
    with producer.cond:
        producer.cond.wait_for(lambda: producer.activity[0] == "generating (refill, generation 3)"
                               or producer.error is not None)
    assert producer.state().startswith("rollout generating (refill, generation 3): step 1 on version 0")
    trainer.wg.go.set()
    producer.stop()  # the next refill sees the stop
    assert not producer.thread.is_alive() and producer.error is None
    assert {call[:2] for call in trainer.wg.calls} == {(1, 0)}
