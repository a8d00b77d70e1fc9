"""The child side of separate_async's rollout process (process.py has the design and the worker's side): it builds
the behaviour policy as the worker does (policy.py's `build_policy`, with the worker's RoleBuilder) and serves the
worker's requests. Its own module: `python -m engine.workers.behaviour.child` is what the worker starts."""
from __future__ import annotations

import os
import queue
import sys
import threading
import traceback
from multiprocessing.connection import Connection

import torch

from engine.workers.behaviour.policy import build_policy
from engine.workers.behaviour.wire import OPS, recv, rng_state, send, set_rng_state
from engine.workers.build import RoleBuilder, load_tokenizer


class _Child:
    def __init__(self, requests: Connection, replies: Connection):
        self.requests, self.replies = requests, replies
        self.send_lock = threading.Lock()  # the reader (publish acks) and the main thread (generations) reply
        self.work: queue.Queue = queue.Queue()
        self.policy = None

    def reply(self, request_id: int, result=None, error: str | None = None) -> None:
        with self.send_lock:
            send(self.replies, {"id": request_id, "ok": error is None, "result": result, "error": error})

    def setup(self, cfg, device: str, num_threads: int) -> None:
        """Build the copy as the worker's BehaviourHost builds it in-process: the same loader, the same plain module
        (full weights in the actor's compute dtype; no process group: generation runs no collective), the same
        rollout and thread count (and, with the first publish, the worker's random state), so that with the same
        weights it samples the same tokens and log-probs."""
        if device == "cuda":
            torch.cuda.set_device(0)
            self.device = torch.device(device, 0)
        else:
            torch.set_num_threads(max(1, num_threads))  # as the worker's own
            self.device = torch.device("cpu")
        self.policy = build_policy(RoleBuilder(cfg, self.device), load_tokenizer(cfg))

    def serve(self) -> None:
        first = recv(self.requests)
        try:
            assert first["op"] == "setup", first["op"]
            self.setup(**{k: v for k, v in first.items() if k not in ("id", "op")})
        except BaseException:  # noqa: BLE001 - reported to the worker, which raises it
            self.reply(first["id"], error=traceback.format_exc())
            return
        self.reply(first["id"], {"pid": os.getpid()})
        threading.Thread(target=self._read, name="rlstudio-rollout-requests", daemon=True).start()
        while True:
            request = self.work.get()
            if request["op"] == "rng":
                self.reply(request["id"], rng_state(self.device.type))
                continue
            try:
                if request.get("rng") is not None:  # the shared stream: go on from the worker's state
                    set_rng_state(request["rng"]["cpu"], request["rng"]["cuda"])
                batch = request["batch"].to(self.device)
                limit = {"max_new_tokens": request["max_new_tokens"]} if request.get("max_new_tokens") else {}
                out, metrics = self.policy.generate(batch, request["version"], newest=request["newest"],
                                                    chunk=request["chunk"], **limit)
                result = (out.cpu(), metrics) if request.get("rng") is None else (out.cpu(), metrics,
                                                                                   rng_state(self.device.type))
            except BaseException:  # noqa: BLE001 - reported to the worker, which raises it
                self.reply(request["id"], error=traceback.format_exc())
                continue
            self.reply(request["id"], result)

    def _read(self) -> None:
        """Every request, in order: publishes are stored at once (a generation running may switch to them between
        chunks), generations queue for the main thread. End-of-file: the worker is gone, so this process goes."""
        try:
            while True:
                request = recv(self.requests)
                op = request["op"]
                if op == "publish":
                    try:
                        if request.get("rng") is not None:  # before any generation: the worker's stream goes on here
                            set_rng_state(request["rng"]["cpu"], request["rng"]["cuda"])
                        self.policy.receive(request["version"], request["state"])
                    except BaseException:  # noqa: BLE001
                        self.reply(request["id"], error=traceback.format_exc())
                        continue
                    self.reply(request["id"], {})
                elif op in ("generate", "rng"):  # in order, after the generations asked before
                    self.work.put(request)
                else:
                    self.reply(request["id"], error=f"unknown request {op!r} (expected one of {OPS})")
        except (EOFError, OSError):
            os._exit(0)  # the worker closed the pipe (stop) or died: nothing is left to serve
        except BaseException:  # noqa: BLE001 - a garbled request: exit, so the worker fails its calls with the cause
            traceback.print_exc()
            os._exit(1)


def main(argv: list[str]) -> int:
    requests = Connection(int(argv[1]), writable=False)
    replies = Connection(int(argv[2]), readable=False)
    _Child(requests, replies).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
