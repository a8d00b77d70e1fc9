"""Host memory that a role's checkpoint state is copied into before its background write (checkpoint.async_save).

Allocating it is what made the first save block (12–21 s for actor + critic of the seed's 0.5B model on an H100:
12 GB of pinned memory, page-locked on the spot) while every later save only copied into it (0.4–1.2 s). So the
buffers are allocated ahead, in a background thread started after the role's first update (`prepare`: the
optimizer's state exists from then on, and its shapes are the checkpoint's), and the first save only copies too.

The thread only allocates host memory: it never reads or syncs the GPU, whose graph captures (the static decoder's,
thread-local) must not see another thread's stream work. On a GPU the buffers are pinned (the device-to-host copies
then run at full speed); on CPU they are plain memory, touched once so that the save does not pay the page faults.
If the state's shapes at the save differ from the prepared ones (or nothing was prepared) the save allocates then,
as before: never a partial checkpoint.
"""
from __future__ import annotations

import sys
import threading
import time

import torch
from torch.distributed.tensor import DTensor

Path = tuple  # a leaf's place in the state dict: its keys and list indexes from the root


def leaf_specs(state_dict) -> dict[Path, tuple[tuple[int, ...], torch.dtype]]:
    """Every tensor leaf's (local shape, dtype) by its path: what the staging buffers must hold. Reads metadata only."""
    specs = {}

    def visit(obj, path):
        if isinstance(obj, torch.Tensor):
            local = obj.to_local() if isinstance(obj, DTensor) else obj
            specs[path] = (tuple(local.shape), local.dtype)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                visit(v, (*path, k))
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                visit(v, (*path, i))

    visit(state_dict, ())
    return specs


class HostStaging:
    """One role's staging buffers, kept from one save to the next (the next save waits for the previous write)."""

    def __init__(self, pin: bool | None = None):
        self.pin = torch.cuda.is_available() if pin is None else pin
        self.specs: dict | None = None
        self.buffers: dict[Path, torch.Tensor] = {}
        self.allocations = 0  # how many times buffers were allocated (1 when prepared and reused)
        self.prepare_s: float | None = None  # the background allocation's seconds
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def prepare(self, state_dict) -> None:
        """Start allocating buffers for this state dict's shapes in a background thread (returns at once)."""
        specs = leaf_specs(state_dict)
        self._thread = threading.Thread(target=self._prepare, args=(specs,), name="checkpoint-staging", daemon=True)
        self._thread.start()

    def _prepare(self, specs) -> None:
        start = time.perf_counter()
        try:
            self._allocate(specs)
        except Exception as e:  # noqa: BLE001  (reported, and the save allocates instead)
            self._error = e
        self.prepare_s = time.perf_counter() - start

    def ready(self) -> bool:
        return self._thread is None or not self._thread.is_alive()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            print(f"[rlstudio] warning: checkpoint staging buffers could not be allocated ahead ({self._error!r}); "
                  "the save allocates them", file=sys.stderr, flush=True)
            self._error, self.specs, self.buffers = None, None, {}

    def _allocate(self, specs) -> None:
        self.buffers = {}  # the old ones go first: never two sets at once
        buffers = {}
        for path, (shape, dtype) in specs.items():
            buf = torch.empty(shape, dtype=dtype, pin_memory=self.pin)
            if not self.pin:
                buf.zero_()  # fault the pages in now, not during the save (pinned memory is resident already)
            buffers[path] = buf
        self.buffers, self.specs = buffers, specs
        self.allocations += 1

    def stage(self, state_dict):
        """A copy of `state_dict` in the host buffers (the same structure; DTensors keep their sharding metadata),
        complete when this returns."""
        self.wait()
        specs = leaf_specs(state_dict)
        if specs != self.specs:  # not prepared, or the state changed shape since
            self._allocate(specs)
        devices = set()

        def copy(obj, path):
            if isinstance(obj, torch.Tensor):
                local = obj.to_local() if isinstance(obj, DTensor) else obj
                buf = self.buffers[path]
                buf.copy_(local.detach(), non_blocking=self.pin and local.is_cuda)
                if local.is_cuda:
                    devices.add(local.device)
                # a DTensor of the same global shape and placements over the host buffer (DCP writes its shard)
                return DTensor(buf, obj._spec, requires_grad=False) if isinstance(obj, DTensor) else buf
            if isinstance(obj, dict):
                return {k: copy(v, (*path, k)) for k, v in obj.items()}
            if isinstance(obj, (list, tuple)):
                return type(obj)(copy(v, (*path, i)) for i, v in enumerate(obj))
            return obj  # numbers, strings, None: immutable

        staged = copy(state_dict, ())
        for device in devices:  # the non-blocking copies are done before the writer thread reads the buffers
            torch.cuda.current_stream(device).synchronize()
        return staged
