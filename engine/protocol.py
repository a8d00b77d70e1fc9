"""Batch: the one container that flows between the driver and the workers.

A Batch holds per-row tensors (same first dimension), per-row Python objects (`meta`, kept as numpy
object arrays so they index like tensors) and batch-level `info`. Splitting over data-parallel workers
and concatenating their results happens here and nowhere else.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import torch


def _as_object_array(values: Sequence[Any]) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        arr[i] = v
    return arr


@dataclass
class Batch:
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    meta: dict[str, np.ndarray] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.meta = {k: v if isinstance(v, np.ndarray) and v.dtype == object else _as_object_array(list(v))
                     for k, v in self.meta.items()}
        sizes = {k: int(v.shape[0]) for k, v in self.tensors.items()} | {k: len(v) for k, v in self.meta.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"Batch fields have different lengths: {sizes}")

    # ---- shape -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        for v in self.tensors.values():
            return int(v.shape[0])
        for v in self.meta.values():
            return len(v)
        return 0

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.meta

    def __getitem__(self, key: str):
        if key in self.tensors:
            return self.tensors[key]
        return self.meta[key]

    def __setitem__(self, key: str, value) -> None:
        if isinstance(value, torch.Tensor):
            self.tensors[key] = value
        else:
            self.meta[key] = _as_object_array(list(value))

    # ---- selection ---------------------------------------------------------------------------------
    def select(self, keys: Iterable[str] | None = None, meta_keys: Iterable[str] | None = None) -> "Batch":
        """A batch with only the named tensors (and meta columns; all meta when meta_keys is None)."""
        tensors = self.tensors if keys is None else {k: self.tensors[k] for k in keys}
        meta = self.meta if meta_keys is None else {k: self.meta[k] for k in meta_keys}
        return Batch(dict(tensors), dict(meta), dict(self.info))

    def index(self, idx) -> "Batch":
        if isinstance(idx, torch.Tensor):
            idx_t, idx_np = idx, idx.cpu().numpy()
        else:
            idx_np = np.asarray(idx)
            idx_t = torch.as_tensor(idx_np)
        return Batch({k: v[idx_t.to(v.device)] for k, v in self.tensors.items()},
                     {k: v[idx_np] for k, v in self.meta.items()}, dict(self.info))

    def slice(self, start: int, end: int) -> "Batch":
        return Batch({k: v[start:end] for k, v in self.tensors.items()},
                     {k: v[start:end] for k, v in self.meta.items()}, dict(self.info))

    def union(self, other: "Batch") -> "Batch":
        """Fields of both; `other` wins on key clashes. Lengths must match."""
        if len(self) and len(other) and len(self) != len(other):
            raise ValueError(f"cannot union batches of {len(self)} and {len(other)} rows")
        return Batch(self.tensors | other.tensors, self.meta | other.meta, self.info | other.info)

    # ---- splitting / joining -----------------------------------------------------------------------
    def split(self, size: int) -> list["Batch"]:
        """Consecutive chunks of at most `size` rows."""
        return [self.slice(i, min(i + size, len(self))) for i in range(0, len(self), size)]

    def chunk(self, n: int) -> list["Batch"]:
        """Exactly n consecutive chunks whose sizes differ by at most one (for data-parallel dispatch)."""
        total = len(self)
        bounds = [total * i // n for i in range(n + 1)]
        return [self.slice(bounds[i], bounds[i + 1]) for i in range(n)]

    @staticmethod
    def concat(batches: Sequence["Batch"]) -> "Batch":
        batches = [b for b in batches if b is not None]
        if not batches:
            return Batch()
        first = batches[0]
        tensors = {}
        for k in first.tensors:
            parts = [b.tensors[k] for b in batches]
            tensors[k] = torch.cat(_pad_to_same_width(parts), dim=0)
        meta = {k: np.concatenate([b.meta[k] for b in batches]) for k in first.meta}
        info = {}
        for b in batches:
            info.update(b.info)
        return Batch(tensors, meta, info)

    def repeat_interleave(self, n: int) -> "Batch":
        """Each row repeated n times in place (prompt i -> rows i*n .. i*n+n-1), as GRPO groups need."""
        idx = np.repeat(np.arange(len(self)), n)
        return self.index(idx)

    def to(self, device) -> "Batch":
        return Batch({k: v.to(device) for k, v in self.tensors.items()}, self.meta, self.info)

    def cpu(self) -> "Batch":
        return self.to("cpu")


def _pad_to_same_width(parts: list[torch.Tensor]) -> list[torch.Tensor]:
    """Right-pads 2-D+ tensors along dim 1 with zeros when chunks came back with different widths."""
    if parts[0].dim() < 2:
        return parts
    width = max(p.shape[1] for p in parts)
    out = []
    for p in parts:
        if p.shape[1] < width:
            pad = torch.zeros((p.shape[0], width - p.shape[1], *p.shape[2:]), dtype=p.dtype, device=p.device)
            p = torch.cat([p, pad], dim=1)
        out.append(p)
    return out
