"""Column types shared by the tables, and the number types of request bodies."""
from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Annotated, Literal

import annotated_types as at
from pydantic import BeforeValidator, Strict
from sqlalchemy import JSON, BigInteger, DateTime, Integer
from sqlalchemy.types import TypeDecorator

# Numbers in request bodies are JSON numbers: pydantic's lax mode would also take true/false and "1.5".
Num = Annotated[float, Strict()]


EXACT = 2**53  # floats are exact integers up to here; past it a float may be an integer orjson could not hold


def integral(value):
    """JSON Schema's `integer` is any number without a fraction (`0.0` too): what the OpenAPI document allows is
    taken. True/false and numeric strings stay refused (strict), and so do floats past 2^53: orjson reads an integer
    past 64 bits as a float, which must not come out as a (rounded) 64-bit integer."""
    return int(value) if type(value) is float and value.is_integer() and -EXACT <= value <= EXACT else value


Int = Annotated[int, Strict(), BeforeValidator(integral)]
# Integers are the database's 64 bits, checked with the body (a 422 naming the field) before anything reads them:
# a row the database would refuse must not reach the ingest's health judge, which keeps state between batches.
# A field with bounds of its own uses its own type (`bounded`): pydantic keeps the last bound given, so Int64's
# would override a field's own `Field(ge=0)`.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# A training step: what every upload's `step` may be (metrics, samples), the same bound everywhere.
MAX_STEP = 2**62


def bounded(low: int, high: int):
    """A strict integer in [low, high], bounds on the type (annotated_types: exact integers in the OpenAPI document;
    sqlmodel's Field(ge=...) writes them as floats, or as unknown `ge`/`le` keys on an optional field)."""
    # the before-validator last: it wraps the constrained integer, whose bounds the document then states as
    # minimum/maximum (put first, pydantic writes them as unknown `ge`/`le` keys)
    return Annotated[int, Strict(), at.Ge(low), at.Le(high), BeforeValidator(integral)]


Int64 = bounded(INT64_MIN, INT64_MAX)
Count = bounded(0, INT64_MAX)  # positions, line numbers, indices
StepInt = bounded(0, MAX_STEP)  # steps and policy versions (the actor's updates)
# What JSON cannot spell, as the dashboard logger sends it.
NonFinite = Literal["NaN", "Infinity", "-Infinity"]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class UTCDateTime(TypeDecorator):
    """Stored as naive UTC (SQLite has no time zones), always returned timezone-aware."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return value

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value


JSONType = JSON().with_variant(JSON(none_as_null=True), "sqlite")
# Every integer column: 64 bits, as the API promises (steps up to 2**62, ids, file sizes). SQLite's INTEGER is 64
# bits already (and only `INTEGER PRIMARY KEY` is the rowid); PostgreSQL's INTEGER is 32: BIGINT there.
BigInt = BigInteger().with_variant(Integer(), "sqlite")


def finite_or_text(value: float | None) -> float | str | None:
    """JSON has no NaN/Infinity: non-finite values go out as the strings 'NaN', 'Infinity', '-Infinity'.
    SQLite stores NaN as NULL, so a NULL metric value reads back as 'NaN'."""
    if value is None:
        return "NaN"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def clean_json(value):
    """Non-finite floats -> None, recursively: JSON responses cannot carry NaN or Infinity."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        try:  # numbers only: their sum is finite exactly when every one is (one C loop, not one call each)
            if math.isfinite(sum(value)):
                return value
        except (TypeError, OverflowError):  # not all numbers (None, text, lists), or ints past float range
            if set(map(type, value)) <= {str, int, bool, type(None)}:  # e.g. the tokens' texts
                return value
        return [clean_json(v) for v in value]
    return value
