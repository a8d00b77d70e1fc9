"""verl's generation dumps (`trainer.rollout_data_dir`, `trainer.validation_data_dir`): one file per step,
`<global_step>.jsonl`, one line per answer: `{"input": prompt, "output": answer, "gts": ground truth, "score": s,
"step": N, ...}` plus each per-answer list of the reward's extra info (`acc`, `pred`, ...). Those become samples
of split `train` (rollout) or `val` (validation), in file order; the extra keys are kept as the sample's extras.

verl records no prompt index or group id; the answers to one prompt (a GRPO group) share the prompt's text, so
`group_uid` is a digest of it: the Samples page's group view then gathers them."""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from typing import IO, Any

from backend.imports.errors import BadFile
from backend.imports.jsonl import read_lines

SHAPE = 'each line of verl\'s generation dump is {"input": ..., "output": ..., "score": ..., "step": N, ...}'
KNOWN = ("input", "output", "gts", "score", "step")
MAX_SOURCE = 200  # sample.data_source


def step_of_name(name: str) -> int | None:
    """verl names each dump after its step: `12.jsonl`."""
    match = re.fullmatch(r"(\d+)\.jsonl", name.rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _score(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _clean(value: Any) -> Any:
    """Extras stored as JSON: non-finite floats become null (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def read_samples(stream: IO[bytes], file: str, split: str, field_name: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, one sample: SampleIn's fields) per line; BadFile naming the first line that is not a dump's."""
    named_step = step_of_name(file)
    for index, (number, value) in enumerate(read_lines(stream, file, field_name)):
        if not isinstance(value, dict):
            raise BadFile(file, f"a JSON {type(value).__name__}, not an object ({SHAPE})", line=number,
                          field=field_name)
        missing = [key for key in ("input", "output") if key not in value]
        if missing:
            raise BadFile(file, f'no "{missing[0]}" ({SHAPE})', line=number, field=field_name)
        step = value.get("step", named_step)
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= 2**62:
            raise BadFile(file, f'"step" is {str(step)[:40]}, not a whole number from 0 to 2^62 (or name the file '
                                '<step>.jsonl, as verl does)', line=number, field=field_name)
        if "score" in value and value["score"] is not None and _score(value["score"]) is None \
                and not (isinstance(value["score"], float)):
            raise BadFile(file, f'"score" is {_text(value["score"])[:40]}, not a number', line=number,
                          field=field_name)
        prompt = _text(value["input"])
        source = value.get("data_source")
        extras = {key: _clean(v) for key, v in value.items() if key not in KNOWN}
        yield number, {"step": step, "split": split, "sample_index": index,
               "group_uid": hashlib.sha1(prompt.encode("utf-8", "replace")).hexdigest()[:16],
               "prompt": prompt, "response": _text(value["output"]), "score": _score(value.get("score")),
               "reward": _score(value.get("reward")),
               "ground_truth": None if value.get("gts") is None else _text(value["gts"]),
               "data_source": source[:MAX_SOURCE] if isinstance(source, str) else None,
               "extras": extras}
