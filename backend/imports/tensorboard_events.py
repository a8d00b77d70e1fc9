"""TensorBoard event files (`events.out.tfevents.*`: verl's `tensorboard` logger, TRL's and transformers' default
report_to) read with TensorBoard's own loader (`EventFileLoader`, a record at a time): each scalar summary becomes a
point (tag = metric key, the event's step and wall time). Histograms, images and text are skipped (counted).

TensorBoard's loader stops quietly at a truncated or corrupt record (a file still being written ends in one), so
a file that yields no scalar at all is refused as not an event file."""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from backend.imports.errors import BadFile

SCALARS = "scalars"  # the plugin that owns scalar summaries once data_compat has migrated them
MAX_KEY = 300


@dataclass
class ScalarPoint:
    key: str
    step: int
    value: float
    wall_time: float


def read_scalars(path: Path, file: str, other: dict[str, int]) -> Iterator[ScalarPoint]:
    """Every scalar of one event file, in file order; `other` counts what was skipped, by plugin name."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    found = 0
    try:
        events = EventFileLoader(str(path)).Load()
        for record, event in enumerate(events, start=1):
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                plugin = value.metadata.plugin_data.plugin_name
                if value.HasField("simple_value"):
                    number = float(value.simple_value)
                elif plugin == SCALARS and value.HasField("tensor"):
                    array = tensor_util.make_ndarray(value.tensor)
                    if array.size != 1:
                        other[plugin] = other.get(plugin, 0) + 1
                        continue
                    number = float(array.reshape(-1)[0])
                else:
                    other[plugin or "other"] = other.get(plugin or "other", 0) + 1
                    continue
                if not value.tag or len(value.tag) > MAX_KEY:
                    raise BadFile(file, f"a tag of {len(value.tag)} characters (1 to {MAX_KEY})", line=record,
                                  field="events", unit="record")
                if event.step < 0:
                    raise BadFile(file, f"step {event.step} is negative", line=record, field="events",
                                  unit="record")
                found += 1
                yield ScalarPoint(value.tag, int(event.step), number,
                                  event.wall_time if math.isfinite(event.wall_time) else 0.0)
    except BadFile:
        raise
    except Exception as exc:  # noqa: BLE001 - the loader's own errors (a damaged record's protobuf, ...) name the file
        raise BadFile(file, f"not readable as TensorBoard events: {str(exc)[:200]}", field="events") from None
    if not found:
        raise BadFile(file, "no scalar summaries: not a TensorBoard event file (events.out.tfevents.*), or one "
                            "without scalars", field="events")
