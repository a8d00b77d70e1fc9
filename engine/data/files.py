"""Reading and writing the row files (parquet / jsonl) that datasets are made of.

Kept free of torch so the preprocessing scripts start fast.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import UserError

HOW_TO_MAKE_DATA = ("create data with `python -m engine.data.gsm8k --local_dir DIR` "
                    "or `python -m engine.data.arith --local_dir DIR`")


class DataError(UserError, ValueError):
    """A problem with the user's data or data settings; the message says how to fix it."""


def as_path_list(files: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    return [Path(os.path.expanduser(str(f))) for f in files]


def to_plain(obj: Any) -> Any:
    """Numpy arrays/scalars (what pandas gives for verl's nested parquet columns) -> lists and Python scalars."""
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return [to_plain(v) for v in obj] if obj.dtype == object else obj.tolist()
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def read_file_rows(path: Path) -> list[dict]:
    """Rows of one file. Errors name the file and say how to create data."""
    if not path.exists():
        raise FileNotFoundError(f"data file not found: {path}; {HOW_TO_MAKE_DATA}")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        # pyarrow's to_pylist gives plain lists/dicts for list<struct> and struct columns.
        return pq.read_table(path).to_pylist()
    if suffix in (".jsonl", ".json"):
        rows = []
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg}); expected one JSON object per line")
                if not isinstance(row, dict):
                    raise DataError(f"{path}:{lineno}: expected a JSON object per line, got {type(row).__name__}")
                rows.append(row)
        return rows
    raise DataError(f"unsupported data file extension {path.suffix!r} for {path}; use .parquet or .jsonl")


def read_rows(files: str | os.PathLike | Sequence[str | os.PathLike]) -> list[dict]:
    """All rows of one file or a list of files (parquet or jsonl), concatenated in order; `~` is expanded."""
    rows: list[dict] = []
    for path in as_path_list(files):
        rows.extend(read_file_rows(path))
    return rows


def write_parquet(rows: Iterable[dict], path: str | os.PathLike) -> Path:
    """Writes rows (nested lists/dicts allowed) as parquet; list-of-dict columns become list<struct> like verl's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(os.path.expanduser(str(path)))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(rows)), path)
    return path
