"""JSON Lines read a line at a time from a binary stream: memory stays at one line however large the file.
Python's own `json.dumps` (what verl writes with) spells NaN / Infinity bare; those lines are read too."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

import orjson

from backend.imports.errors import BadFile

MAX_LINE_BYTES = 64 * 1024 * 1024  # one step's dump of long answers fits; a file without newlines does not


def _loads(raw: bytes, file: str, line: int, field: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadFile(file, f"not UTF-8 text (byte {exc.start + 1} of the line)", line=line, field=field) from None
    try:
        return json.loads(text)  # NaN, Infinity, -Infinity: as Python's json writes them
    except json.JSONDecodeError as exc:
        raise BadFile(file, f"not JSON: {exc.msg} (column {exc.colno})", line=line, field=field) from None
    except RecursionError:
        raise BadFile(file, "not JSON: nested too deeply", line=line, field=field) from None


def read_lines(stream: IO[bytes], file: str, field: str) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; BadFile naming the first line that is not JSON."""
    number = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES:
            raise BadFile(file, f"longer than {MAX_LINE_BYTES // 2**20} MiB: is this a JSON Lines file "
                                "(one JSON object per line)?", line=number, field=field)
        if raw.strip():
            yield number, _loads(raw, file, number, field)
