"""separate_async's rollout process (engine/workers/behaviour/process.py), real child processes on the tiny
model: many requests and publishes in flight from several threads all complete with their own answers (verl #7990's
shape, scaled down), a killed rollout process fails the call waiting on it and every later one with the cause, the
child exits when its worker dies, and an engine run whose rollout process is killed fails with the cause and leaves
no process behind (issue 29)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
import torch

from engine.protocol import Batch
from engine.rollout.versions import KEY
from engine.workers.behaviour.process import RolloutProcess, RolloutProcessDied, RolloutProcessError
from tests.waiting import wait_for

GUARD_S = 300  # failure guards only (a hung call is reported by name); nothing waits for a time to pass


def _cfg(tiny_model: str):
    from engine.config import config_from_argv

    return config_from_argv([f"actor_rollout_ref.model.path={tiny_model}", "data.train_files=unused.parquet",
                             "data.val_files=unused.parquet", "actor_rollout_ref.rollout.name=hf",
                             "actor_rollout_ref.rollout.response_length=4",
                             "+actor_rollout_ref.rollout.engine_kwargs.hf.decode=static"])


def _start(tiny_model: str):
    from transformers import AutoModelForCausalLM

    actor = AutoModelForCausalLM.from_pretrained(tiny_model)
    return RolloutProcess(actor, {"cfg": _cfg(tiny_model), "device": "cpu", "num_threads": 1})


def _prompts(rows: int, first: int) -> Batch:
    """`rows` prompts whose tokens encode `first` (each reply must carry its own request's prompts back)."""
    ids = (torch.arange(rows * 5).reshape(rows, 5) + first) % 40 + 3
    mask = torch.ones_like(ids)
    return Batch({"input_ids": ids, "attention_mask": mask, "position_ids": mask.cumsum(-1) - 1})


def _gone(pid: int) -> bool:
    """The process has exited (a zombie left to a parent that does not reap counts as exited)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_many_requests_and_publishes_in_flight_all_complete_with_their_own_answers(tiny_model):
    rp = _start(tiny_model)
    try:
        rp.publish(0)
        in_flight: set[str] = set()  # what each thread is waiting on, for the guard's report
        results: dict[str, object] = {}
        errors: list[str] = []
        book = threading.Lock()

        def generator(t: int) -> None:
            for i in range(6):
                name = f"generate t{t}#{i}"
                batch = _prompts(rows=1 + (t + i) % 4, first=100 * t + i)
                with book:
                    in_flight.add(name)
                try:
                    out, metrics = rp.generate(batch, 0)
                    results[name] = (batch, out, metrics)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(f"{name}: {type(exc).__name__}: {exc}")
                with book:
                    in_flight.discard(name)

        def publisher(t: int) -> None:
            for version in range(1 + t, 13, 2):  # two publishers, interleaved versions 1..12
                name = f"publish v{version}"
                with book:
                    in_flight.add(name)
                try:
                    results[name] = rp.publish(version)
                except BaseException as exc:  # noqa: BLE001
                    errors.append(f"{name}: {type(exc).__name__}: {exc}")
                with book:
                    in_flight.discard(name)

        threads = [threading.Thread(target=generator, args=(t,)) for t in range(4)]
        threads += [threading.Thread(target=publisher, args=(t,)) for t in range(2)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + GUARD_S  # a failure guard: the work is bounded (24 generations, 12 publishes)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with book:
            assert not in_flight, f"hung: {sorted(in_flight)}"
        assert not errors, errors
        assert len(results) == 24 + 12
        for name, result in results.items():
            if name.startswith("generate"):
                batch, out, metrics = result
                # its own prompts back (no reply given to another request), every token on version 0
                assert torch.equal(out["prompts"], batch["input_ids"]), name
                assert out["responses"].shape == (len(batch), 4) and (out[KEY] == 0).all(), name
                assert "timing_s/gen_worker" in metrics
        # every version arrived whole: the newest loads and generates (a torn or interleaved message would not)
        out, metrics = rp.generate(_prompts(2, 7), 12)
        assert (out[KEY] == 12).all() and metrics["rollout/weights_stale"] == 0.0
    finally:
        rp.close()
    assert rp.proc.returncode == 0  # stopped: it exits on its request pipe's end-of-file


def test_an_error_inside_the_rollout_process_is_raised_with_its_traceback_and_it_keeps_serving(tiny_model):
    rp = _start(tiny_model)
    try:
        rp.publish(0)
        with pytest.raises(RolloutProcessError, match=r"failed in generate:(.|\n)*version 5 was never published"):
            rp.generate(_prompts(2, 0), 5)
        out, _ = rp.generate(_prompts(2, 0), 0)
        assert out["responses"].shape == (2, 4)
    finally:
        rp.close()


def test_a_killed_rollout_process_fails_the_waiting_call_and_every_later_one_with_the_cause(tiny_model):
    rp = _start(tiny_model)
    try:
        rp.publish(0)
        os.kill(rp.pid, signal.SIGSTOP)  # it cannot answer: the request below is surely in flight when it dies
        raised: list[BaseException] = []

        def call():
            try:
                rp.generate(_prompts(2, 0), 0)
            except BaseException as exc:  # noqa: BLE001
                raised.append(exc)

        waiting = threading.Thread(target=call)
        waiting.start()
        def in_flight() -> bool:
            with rp.lock:
                return any(op == "generate" for op, _ in rp.pending.values())

        wait_for(in_flight, GUARD_S, 0.05, "the generate in flight")
        os.kill(rp.pid, signal.SIGKILL)
        waiting.join(GUARD_S)
        assert not waiting.is_alive(), "the call waiting on a dead rollout process never returned"
        assert len(raised) == 1 and isinstance(raised[0], RolloutProcessDied), raised
        message = str(raised[0])
        assert f"the rollout process (pid {rp.pid}) died: killed by signal 9 (SIGKILL" in message
        assert "in flight: generate #" in message
        with pytest.raises(RolloutProcessDied, match=f"pid {rp.pid}\\) died: killed by signal 9"):
            rp.publish(1)  # the trainer's next publish fails at once with the same cause
    finally:
        rp.close()
    assert rp.proc.returncode == -signal.SIGKILL  # reaped


def test_the_rollout_process_exits_when_its_worker_dies(tiny_model, tmp_path):
    from tests.checkout_path import with_checkout
    from tests.integration.helpers import REPO

    script = tmp_path / "worker.py"
    script.write_text(
        "import sys\n"
        "from tests.integration.test_rollout_process import _start\n"
        "rp = _start(sys.argv[1])\n"
        "print(rp.pid, flush=True)\n"
        "sys.stdin.read()\n")
    worker = subprocess.Popen([sys.executable, str(script), tiny_model], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=REPO, env=with_checkout())
    try:
        pid = int(worker.stdout.readline())  # the rollout process is up
        assert not _gone(pid)
        worker.kill()  # no stop request, no clean-up: the child only sees its pipe close
        worker.wait()
        wait_for(lambda: _gone(pid), GUARD_S, 0.05, f"the orphaned rollout process {pid} exiting")
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_an_engine_run_whose_rollout_process_is_killed_fails_with_the_cause_and_leaves_nothing(
        tiny_model, arith_data, tmp_path):
    from tests.integration.helpers import base_args, engine_env, read_records
    from tests.integration.test_async_cpu import SMALL

    out = tmp_path / "run"
    args = base_args(tiny_model, arith_data, out, **{
        **SMALL, "trainer.logger": "[console,file]", "trainer.total_training_steps": 200, "trainer.test_freq": -1,
        "trainer.v1.trainer_mode": "separate_async", "trainer.v1.sampler.max_off_policy_threshold": 2,
        "trainer.v1.separate_async.parameter_sync_step": 2})
    log_path = tmp_path / "console.log"
    with log_path.open("w") as log:
        run = subprocess.Popen([sys.executable, "-m", "engine.main_ppo", *args], cwd=tmp_path, env=engine_env(),
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        marker = "rollout process started (pid "

        def past_step_1() -> bool:
            assert run.poll() is None, f"the run ended first:\n{log_path.read_text()[-3000:]}"
            return marker in log_path.read_text() and any(r["step"] >= 1 for r in read_records(out / "metrics.jsonl"))

        wait_for(past_step_1, GUARD_S, 0.05, "the run past step 1 with its rollout process started")
        pid = int(log_path.read_text().split(marker)[1].split(")")[0])
        family = psutil.Process(run.pid).children(recursive=True)
        assert pid in [p.pid for p in family]  # the rollout process is the run's own child
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        code = run.wait(GUARD_S)  # a guard: the run must end on its own, not hang
        took = time.monotonic() - killed
        console = log_path.read_text()
        assert code != 0, console[-3000:]
        assert f"the rollout process (pid {pid}) died: killed by signal 9 (SIGKILL" in console, console[-3000:]
        steps = [r["step"] for r in read_records(out / "metrics.jsonl")]
        assert max(steps) < 200, f"the run went on training after its rollout process died ({took:.1f} s)"
        left = [p for p in family if not _gone(p.pid)]
        assert not left, f"left behind: {left}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_carry_over_through_the_rollout_process_is_colocate_asyncs_run_to_the_bit(tiny_model, arith_data, tmp_path):
    """Carry-over's chunks (max_new_tokens, the `ended` rows) cross the pipe: with no run-ahead the versions are
    deterministic, so separate_async's run is colocate_async's, carried groups included."""
    from tests.integration.test_async_carry import STEPS, _run
    from tests.integration.test_async_cpu import _differ

    colocated = _run(tiny_model, arith_data, tmp_path / "colocate")
    separate = _run(tiny_model, arith_data, tmp_path / "separate", **{
        "trainer.v1.trainer_mode": "separate_async", "trainer.v1.separate_async.num_warmup_batches": 0,
        "trainer.v1.separate_async.parameter_sync_step": 1})
    assert sorted(separate.metrics) == sorted(colocated.metrics) and len(separate.metrics) >= STEPS
    assert any(colocated.metrics[s]["rollout/carried_tokens"] > 0 for s in range(1, STEPS))  # something was carried
    for step in colocated.metrics:
        assert not _differ(colocated.metrics[step], separate.metrics[step]), step


def test_strict_separate_async_shares_the_workers_random_stream_with_sampled_validation(tiny_model, arith_data,
                                                                                           tmp_path):
    """At threshold 1 the rollout runs only while the trainer waits, so the worker and the rollout process hand one
    random stream back and forth (the worker's state out with each generation, the child's back with its batch):
    validation that samples between steps draws from that stream in the worker, as in the sync trainer, and the
    strict run stays the sync run to the bit."""
    from tests.integration.test_async_cpu import _differ, _train

    sampled = {"actor_rollout_ref.rollout.val_kwargs.do_sample": "True",
               "actor_rollout_ref.rollout.val_kwargs.temperature": 1.0, "trainer.test_freq": 1}
    sync = _train(tiny_model, arith_data, tmp_path / "sync", **sampled)
    strict = _train(tiny_model, arith_data, tmp_path / "separate", **sampled, **{
        "trainer.v1.trainer_mode": "separate_async", "trainer.v1.sampler.max_off_policy_threshold": 1,
        "trainer.v1.separate_async.parameter_sync_step": 2})
    assert sorted(sync.metrics) == sorted(strict.metrics) == [1, 2, 3]
    for step in (1, 2, 3):
        assert "val-core/arith/reward/mean@1" in sync.metrics[step]  # validation sampled after every step
        assert not _differ(sync.metrics[step], strict.metrics[step]), step
