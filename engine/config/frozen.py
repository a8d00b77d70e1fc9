"""A resolved config is read-only: resolve() and load_resolved() hand out frozen configs, so the job runs exactly
the config the server checked, stored and shows. What a run decides at its start (the device, local paths of
built-in assets, micro-batches sized from the GPU's memory) is set on an editable copy and recorded as the run's
plan (engine/config/plan.py), never written back into the resolved config.

Frozen are the typed sections and every list and mapping inside them (trainer.logger, ray_init.runtime_env,
rollout.engine_kwargs, ...): those become FrozenList / FrozenDict, a list and a dict to every reader (isinstance,
JSON, pickling) that refuse to change. A deep copy of one is a plain, editable list or dict again."""
from __future__ import annotations

import copy
from typing import TypeVar

from pydantic import BaseModel

from engine.config.schema import READ_ONLY, ReadOnlyConfigError, Section

__all__ = ["FrozenDict", "FrozenList", "ReadOnlyConfigError", "editable_copy", "freeze", "is_frozen"]

C = TypeVar("C", bound=BaseModel)


def _refuse(self, *args, **kwargs):
    raise ReadOnlyConfigError(f"{type(self).__name__}: {READ_ONLY}")


def _plain(node):
    """A deep, editable copy of a frozen container's contents."""
    if isinstance(node, dict):
        return {key: _plain(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_plain(value) for value in node]
    return copy.deepcopy(node)


class FrozenDict(dict):
    """A mapping of a resolved config: a dict that refuses every change."""
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def __reduce__(self):  # pickle rebuilds it from a plain dict (the default would set items one by one)
        return (FrozenDict, (dict(self),))

    def __deepcopy__(self, memo):
        return _plain(self)


class FrozenList(list):
    """A list of a resolved config: a list that refuses every change."""
    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __iadd__ = __imul__ = _refuse

    def __reduce__(self):
        return (FrozenList, (list(self),))

    def __deepcopy__(self, memo):
        return _plain(self)


def _frozen(node):
    if isinstance(node, dict) and not isinstance(node, FrozenDict):
        return FrozenDict({key: _frozen(value) for key, value in node.items()})
    if isinstance(node, list) and not isinstance(node, FrozenList):
        return FrozenList(_frozen(value) for value in node)
    return node


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
    """`cfg` itself, made read-only (every typed section, and the lists and mappings inside); returns it."""
    for section in _sections(cfg):
        for name in type(section).model_fields:
            value = section.__dict__[name]
            if isinstance(value, (dict, list)):
                section.__dict__[name] = _frozen(value)  # past __setattr__: no re-validation into a plain copy
    return _mark(cfg, True)


def editable_copy(cfg: C) -> C:
    """A deep copy of `cfg` that may be changed (the original stays as it is)."""
    return _mark(cfg.model_copy(deep=True), False)


def is_frozen(cfg: BaseModel) -> bool:
    return all(section._read_only for section in _sections(cfg))
