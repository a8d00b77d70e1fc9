"""The channel between a worker and its rollout process (process.py, child.py): two one-way pipes, each message a
pickled header with its tensors sent after it as raw bytes, read straight into tensors (one copy each way, no
pickling of weights); and the random state the two hand each other."""
from __future__ import annotations

import io
import pickle
from multiprocessing.connection import Connection

import torch

OPS = ("setup", "publish", "generate", "rng")  # the requests a rollout process serves


def rng_state(device: str) -> dict:
    """torch's random state in this process: the CPU generator's, and the GPU's on `device` cuda."""
    return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state() if device == "cuda" else None}


def set_rng_state(cpu: torch.Tensor, cuda: torch.Tensor | None) -> None:
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda)


# ---- the wire: a pickled header, then each tensor's bytes ----------------------------------------------------
class _Pickler(pickle.Pickler):
    def __init__(self, file, tensors: list):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.tensors = tensors

    def persistent_id(self, obj):
        if isinstance(obj, torch.Tensor):
            self.tensors.append(obj.detach().cpu().contiguous())  # no copy for a contiguous CPU tensor
            return len(self.tensors) - 1
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, tensors: list):
        super().__init__(file)
        self.tensors = tensors

    def persistent_load(self, index):
        return self.tensors[index]


def send(conn: Connection, obj) -> None:
    """One message: the header (obj with its tensors replaced by indexes, and their layouts), then each tensor's
    bytes. The caller holds the connection's send lock."""
    tensors: list[torch.Tensor] = []
    body = io.BytesIO()
    _Pickler(body, tensors).dump(obj)
    layouts = [(str(t.dtype).removeprefix("torch."), tuple(t.shape), t.numel() * t.element_size()) for t in tensors]
    conn.send_bytes(pickle.dumps((layouts, body.getvalue()), protocol=pickle.HIGHEST_PROTOCOL))
    for tensor, (_, _, nbytes) in zip(tensors, layouts):
        if nbytes:
            conn.send_bytes(tensor.reshape(-1).view(torch.uint8).numpy())


def recv(conn: Connection):
    """A message sent by `send` (EOFError when the other side has closed)."""
    layouts, body = pickle.loads(conn.recv_bytes())
    tensors = []
    for dtype, shape, nbytes in layouts:
        dtype = getattr(torch, dtype)
        if not nbytes:
            tensors.append(torch.empty(shape, dtype=dtype))
            continue
        raw = torch.empty(nbytes, dtype=torch.uint8)
        conn.recv_bytes_into(raw.numpy())  # straight into the tensor's memory
        tensors.append(raw.view(dtype).reshape(shape))
    return _Unpickler(io.BytesIO(body), tensors).load()
