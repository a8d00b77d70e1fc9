"""JSON for the hot paths (sample and metric ingest, JSON columns): orjson, ~10x the standard library on long
float arrays, with the standard library's leniency kept where old data or other clients need it.

- loads: orjson; stored text it refuses (NaN / Infinity literals, which Python's json writes) is read by the
  standard library with those literals as None, what non-finite numbers become everywhere here. Request
  bodies are read by backend/api/json_body.py, with the same reading on the routes that take them.
- dumps: orjson (non-finite floats -> null, non-string keys as strings, numpy arrays); str for SQLAlchemy."""
from __future__ import annotations

import json
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def loads(data: str | bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data, parse_constant=lambda _: None)


def dumps(value: Any) -> str:
    return orjson.dumps(value, option=_OPTIONS).decode()
