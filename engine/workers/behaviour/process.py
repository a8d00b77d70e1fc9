"""separate_async's rollout process: the behaviour policy (policy.py) in an OS process of its own, beside the
trainer worker that starts it (engine/trainer/ASYNC.md, "The rollout process").

The worker's side is `RolloutProcess`, with BehaviourPolicy's two calls: `publish(version)` sends the actor's full
weights (gathered as BehaviourPolicy.publish gathers them: policy.full_weights) as a numbered version,
`generate(batch, version, newest, chunk)` asks for a batch sampled with exactly that version. The child (`python -m
engine.workers.behaviour.child`) builds the copy as the worker builds it (same loader, a plain module with
the full weights in the actor's compute dtype, the hf static-decode rollout; no process group), continues
the worker's random stream (handed back and forth with each generation when the rollout does not run ahead) and
serves the calls.

The channel: two one-way pipes (requests, replies). Every request carries an id and the reply names it, so the
worker's two callers (the main thread publishing, the producer thread waiting on a generation) never take each
other's answer; one lock per direction keeps a message's frames together. On each side one reader thread reads
everything: in the child a publish is stored as soon as it arrives (also while a generation runs, so partial rollout
can switch mid-batch) and generations queue for the child's main thread, one at a time; in the worker the reader
hands each reply to the call waiting for it. A message is a pickled header with its tensors sent after it as raw
bytes, read straight into tensors (one copy each way, no pickling of weights).

Failure: when the child dies its pipe ends close, the worker's reader sees end-of-file at once, reaps the child and
fails every waiting call, and every later one, with the cause ("the rollout process (pid N) died: killed by signal
9 (SIGKILL) ..."). When the worker dies the child's reader sees end-of-file and the child exits: no orphans.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import Connection

import torch

from engine.workers.behaviour.policy import full_weights
from engine.workers.behaviour.wire import recv, rng_state, send, set_rng_state

CHILD = "engine.workers.behaviour.child"  # the child's module, run as `python -m`


class RolloutProcessDied(RuntimeError):
    """The rollout process exited (killed, crashed, out of memory) while the run needed it."""


class RolloutProcessError(RuntimeError):
    """A call raised inside the rollout process (its traceback is in the message)."""


# ---- the worker's side -------------------------------------------------------------------------------------
class RolloutProcess:
    """BehaviourPolicy's calls (publish, generate) served by a child process. Thread-safe: any thread may call."""

    def __init__(self, actor_module, setup: dict, shared_stream: bool = False, dtype: torch.dtype | None = None):
        """`setup`: what the child builds from (`cfg`, `device`, `num_threads`; see `_Child.setup` in
        child.py). Returns once the child has built its copy (or raises why it could not). `dtype`: the
        copy's (the actor's compute dtype), which a publish casts the weights to before they leave the device.
        `shared_stream`: the rollout generates only while the worker waits for it (no run-ahead), so the two hand
        one random stream back and forth: the worker's
        state goes out with each generation and the child's comes back with the batch, and every draw, the worker's
        (a sampled validation) and the rollout's, comes from the stream in the sync trainer's order."""
        self.actor_module, self.dtype = actor_module, dtype
        self.device = setup["device"]
        self.shared_stream = shared_stream
        self.seeded = False  # the first publish also hands over the worker's random state
        to_child, child_reads = os.pipe()[::-1]  # (write end, read end)
        child_writes, from_child = os.pipe()[::-1]
        # the pipes are not inherited by any other process (os.pipe's fds are non-inheritable; pass_fds makes these
        # two the child's only), so end-of-file on them means this child, or this worker, is gone
        self.proc = subprocess.Popen([sys.executable, "-m", CHILD, str(child_reads), str(child_writes)],
                                     pass_fds=(child_reads, child_writes), stdin=subprocess.DEVNULL)
        os.close(child_reads)
        os.close(child_writes)
        self.pid = self.proc.pid
        self.requests = Connection(to_child, readable=False)
        self.replies = Connection(from_child, writable=False)
        self.send_lock = threading.Lock()  # one message's frames together
        self.lock = threading.Lock()  # the books below
        self.pending: dict[int, tuple[str, Future]] = {}
        self.next_id = 0
        self.failure: BaseException | None = None
        self.closing = False
        self.reader = threading.Thread(target=self._read, name=f"rlstudio-rollout-process-{self.pid}", daemon=True)
        self.reader.start()
        try:
            self.call("setup", **setup)
        except BaseException:
            self.close()
            raise

    # ---- BehaviourPolicy's calls ------------------------------------------------------------------------------
    def publish(self, version: int) -> dict:
        """Send the actor's current full weights as `version`; returns once the child holds them. A collective
        (policy.full_weights): every worker publishes at the same point, between updates, in the main thread."""
        start = time.perf_counter()
        state = full_weights(self.actor_module, self.dtype)
        rng = None
        if not self.seeded:
            # the first publish comes as the producer starts, after a resume has restored the worker's random
            # state: from here on the child's rollout draws what the worker's own rollout would have drawn
            rng = rng_state(self.device)
        self.call("publish", version=int(version), state=state, rng=rng)
        self.seeded = True
        return {"timing_s/update_weights": time.perf_counter() - start}

    def generate(self, batch, version: int, newest: int | None = None, chunk: int = 0,
                 max_new_tokens: int | None = None):
        rng = rng_state(self.device) if self.shared_stream else None
        result = self.call("generate", batch=batch, version=int(version), newest=newest, chunk=int(chunk),
                           max_new_tokens=max_new_tokens, rng=rng)
        if rng is None:
            return result
        out, metrics, after = result
        set_rng_state(after["cpu"], after["cuda"])  # the stream goes on in the worker after the rollout's draws
        return out, metrics

    @contextlib.contextmanager
    def rng_for_checkpoint(self):
        """While a checkpoint records the worker's random state: the child's instead (after the generations asked
        before), the worker's own put back after. The rollout draws in the child, so a resume (whose first publish
        hands the restored state to the new child) continues the rollout's stream as the sync trainer's does."""
        if self.shared_stream or not self.seeded:  # the worker's state is the stream's
            yield
            return
        theirs = self.call("rng")
        own = (torch.get_rng_state(), torch.cuda.get_rng_state() if self.device == "cuda" else None)
        set_rng_state(theirs["cpu"], theirs["cuda"])
        try:
            yield
        finally:
            set_rng_state(*own)

    # ---- the channel --------------------------------------------------------------------------------------------
    def call(self, op: str, **kwargs):
        """Send one request and wait for its reply. The wait always ends: the reader thread answers it with the
        reply or, when the child dies, with the cause."""
        future: Future = Future()
        with self.lock:
            if self.failure is not None:
                raise self._failure()
            if self.closing:
                raise RolloutProcessDied(f"the rollout process (pid {self.pid}) was stopped; {op} cannot run")
            request_id = self.next_id
            self.next_id += 1
            self.pending[request_id] = (op, future)
        try:
            with self.send_lock:
                send(self.requests, {"id": request_id, "op": op, **kwargs})
        except (BrokenPipeError, ConnectionError, OSError):
            pass  # the child is gone: the reader sees end-of-file and fails this call with the cause
        return future.result()

    def _read(self) -> None:
        try:
            while True:
                reply = recv(self.replies)
                with self.lock:
                    op, future = self.pending.pop(reply["id"])
                if reply["ok"]:
                    future.set_result(reply["result"])
                else:
                    future.set_exception(RolloutProcessError(
                        f"the rollout process (pid {self.pid}) failed in {op}:\n{reply['error']}"))
        except (EOFError, OSError):
            self._gone()
        except BaseException as exc:  # noqa: BLE001 - a garbled message: nothing after it can be trusted
            self._fail(RolloutProcessDied(f"the rollout process (pid {self.pid}): unreadable reply "
                                          f"({type(exc).__name__}: {exc})"))
            self._stop_child()

    def _gone(self) -> None:
        """End-of-file from the child: it exited. Reap it and say how, to every call waiting and every later one."""
        how = self._exit_status()
        with self.lock:
            closing = self.closing
            in_flight = sorted(f"{op} #{i}" for i, (op, _) in self.pending.items())
        what = "was stopped" if closing else f"died: {how}"
        self._fail(RolloutProcessDied(f"the rollout process (pid {self.pid}) {what}"
                                      + (f"; in flight: {', '.join(in_flight)}" if in_flight else "")))

    def _exit_status(self) -> str:
        try:
            code = self.proc.wait(timeout=30)  # it closed its pipe: it is exiting (a guard, not a timing)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return "it closed its pipe but kept running (killed now)"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "unnamed"
            oom = "; the kernel's out-of-memory killer also sends it" if -code == signal.SIGKILL else ""
            return f"killed by signal {-code} ({name}{oom})"
        return f"exited with code {code} (its own error, if any, is printed above)"

    def _fail(self, error: BaseException) -> None:
        with self.lock:
            if self.failure is None:
                self.failure = error
            waiting, self.pending = list(self.pending.values()), {}
        for _, future in waiting:
            if not future.done():
                future.set_exception(self._failure())

    def _failure(self) -> BaseException:
        """The failure, as a new exception for each caller (threads raising one object would share its traceback)."""
        return type(self.failure)(str(self.failure))

    def _stop_child(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        """Stop the child and reap it (the end of a run, or its failure). Safe to call twice. Closing the request
        pipe is the stop: the child exits on its end-of-file, mid-generation or idle. A writer stuck on a child that
        no longer reads (it holds the send lock) cannot be waited for: the child is killed instead."""
        with self.lock:
            if self.closing:
                return
            self.closing = True
        if self.send_lock.acquire(timeout=30):  # a guard against a stuck writer, not a timing
            try:
                self.requests.close()
            finally:
                self.send_lock.release()
        else:
            self.proc.kill()
        try:
            self.proc.wait(timeout=60)  # a guard: it exits as soon as it reads the end-of-file
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if threading.current_thread() is not self.reader:
            self.reader.join()
        self.replies.close()
        if not self.requests.closed:  # the stuck writer has failed now; its lock is free
            with self.send_lock:
                self.requests.close()
        self._fail(RolloutProcessDied(f"the rollout process (pid {self.pid}) was stopped"))
