"""A run's plan: what the job decides at its start from the machine it runs on, beside the resolved config it
never rewrites (engine/config/frozen.py). The driver decides the device (trainer.device=auto) and the local paths
of built-in assets; each worker decides what depends on its device and memory (packing on GPU, micro-batches
sized from free memory, gradient checkpointing). The job reports the plan with its `started` status, so the
server keeps it with the run (its facts' `plan`) and the run page shows it beside the config.

A plan is made by changing an editable copy of the resolved config (the config the run's parts read) and taking
the difference, each key with why it changed."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from engine.config.frozen import editable_copy, freeze


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def changes(before: BaseModel, after: BaseModel) -> dict[str, tuple[Any, Any]]:
    """{dotted key: (value before, value after)} of every key that differs."""
    a, b = _flat(before.model_dump(mode="json")), _flat(after.model_dump(mode="json"))
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


class Plan:
    """The keys one part of the job set on its copy of the resolved config, each with its reason.

    `Plan.start(resolved)` gives the copy to change (`plan.config`); `plan.record(why)` adds what changed since the
    last record with that reason; `plan.entries` are JSON: [{key, value, was, why, by}]."""

    def __init__(self, resolved: BaseModel, by: str):
        self.resolved = resolved
        self.config = editable_copy(resolved)
        self.by = by  # "driver" or "worker"
        self.entries: list[dict[str, Any]] = []
        self._seen = editable_copy(resolved)

    @classmethod
    def start(cls, resolved: BaseModel, by: str) -> Plan:
        return cls(resolved, by)

    def record(self, why: str) -> None:
        for key, (was, value) in changes(self._seen, self.config).items():
            self.entries.append({"key": key, "value": value, "was": was, "why": why, "by": self.by})
        self._seen = editable_copy(self.config)

    def done(self) -> BaseModel:
        """The planned config, read-only from here on."""
        return freeze(self.config)


def describe(entries: list[dict[str, Any]]) -> str:
    """One line per planned key: 'key: was -> value (why)'."""
    return "\n".join(f"{e['key']}: {e['was']!r} -> {e['value']!r} ({e['why']})" for e in entries)
