"""A resolved config is read-only: resolve() and load_resolved() hand out frozen configs, so the job runs exactly
the config the server checked, stored and shows. What a run decides at its start (the device, local paths of
built-in assets, micro-batches sized from the GPU's memory) is set on an editable copy and recorded as the run's
plan (engine/config/plan.py), never written back into the resolved config.

Frozen are the typed sections; a free-form mapping inside one (ray_init.runtime_env, engine_kwargs, +keys) is a
plain dict and is not."""
from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from engine.config.schema import ReadOnlyConfigError, Section

__all__ = ["ReadOnlyConfigError", "editable_copy", "freeze", "is_frozen"]

C = TypeVar("C", bound=BaseModel)


def _sections(node):
    if isinstance(node, Section):
        yield node
        for name in type(node).model_fields:
            yield from _sections(getattr(node, name))
    elif isinstance(node, (list, tuple)):
        for item in node:
            yield from _sections(item)
    elif isinstance(node, dict):
        for item in node.values():
            yield from _sections(item)


def _mark(cfg: C, read_only: bool) -> C:
    for section in _sections(cfg):
        section._read_only = read_only
    return cfg


def freeze(cfg: C) -> C:
    """`cfg` itself, made read-only (every typed section); returns it."""
    return _mark(cfg, True)


def editable_copy(cfg: C) -> C:
    """A deep copy of `cfg` that may be changed (the original stays as it is)."""
    return _mark(cfg.model_copy(deep=True), False)


def is_frozen(cfg: BaseModel) -> bool:
    return all(section._read_only for section in _sections(cfg))
