"""Errors the routes answer with: a 422 names the field (`detail[0].loc`, and `field` for config keys)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import HTTPException, status
from sqlmodel import SQLModel

from backend.services import run_config
from backend.services.run_config import RunConfigError


class ErrorMessage(SQLModel):
    """Every error but a 422: what went wrong and, where it helps, what to do."""

    detail: str


_WHY = {401: "no API token (Authorization: Bearer)", 403: "a token that may not do this",
        404: "no such run, experiment, sample, file or preset", 409: "conflicts with the current state",
        413: "a batch over the request limits: split it"}


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these error codes (the 422s are FastAPI's own, with `loc` naming the field)."""
    return {code: {"model": ErrorMessage, "description": _WHY[code]} for code in codes}


# A 422's answer is bounded whatever was sent: the first MAX_ERRORS errors, each `loc` part, `msg` and echoed
# `input` cut short, non-finite numbers spelled as text, containers (and bytes) never echoed.
MAX_ERRORS = 50
_INT64 = (-(2**63), 2**64)  # what JSON readers here take as integers (orjson: int64 and uint64)


def safe_text(value: Any, limit: int = 100) -> str:
    """`value` as text JSON can carry: at most `limit` characters (then '…'), lone surrogates escaped."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = text[:limit] + "…"
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


_DROP = object()


def _echo(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if _INT64[0] <= value < _INT64[1] else _DROP
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return safe_text(value)
    return _DROP  # a list, an object, bytes: the request has them


def _error(raw: Any) -> dict[str, Any]:
    raw = raw if isinstance(raw, dict) else {"msg": str(raw)}
    loc = raw.get("loc") or ()
    error: dict[str, Any] = {
        "loc": [p if isinstance(p, int) and not isinstance(p, bool) else safe_text(p) for p in list(loc)[:80]],
        "msg": safe_text(raw.get("msg", ""), 500), "type": safe_text(raw.get("type", "value_error"))}
    if "input" in raw and (echo := _echo(raw["input"])) is not _DROP:
        error["input"] = echo
    ctx = {safe_text(k): v for k, v in ((k, _echo(v)) for k, v in list((raw.get("ctx") or {}).items())[:10])
           if v is not _DROP}
    if ctx:
        error["ctx"] = ctx
    return error


def validation_detail(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """FastAPI's 422 `detail` ([{loc, msg, type, input?, ctx?}]), made safe to encode and bounded in size: the
    request may hold NaN, a 10 MB string or 1,000 nested arrays, and its answer must not."""
    detail = [_error(e) for e in errors[:MAX_ERRORS]]
    if len(errors) > MAX_ERRORS:
        first = _error(errors[MAX_ERRORS])["loc"][:1] or ["body"]
        detail.append({"loc": first, "msg": f"and {len(errors) - MAX_ERRORS} more errors", "type": "too_many_errors"})
    return detail


def unprocessable(loc: list[str | int], msg: str, kind: str = "value_error") -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=[{"loc": loc, "msg": msg, "type": kind}])


def config_error(exc: RunConfigError) -> HTTPException:
    loc = ["body"] + (["preset"] if exc.field == "preset" else ["config"] + (exc.field.split(".") if exc.field else []))
    detail = {"loc": loc, "msg": exc.message, "type": "config_error", "field": exc.field}
    if exc.fix:  # the message ends with it too; apart, for a client that shows it by the field
        detail["fix"] = exc.fix
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=[detail])


def validated_config(preset: str | None, config: dict[str, Any], overrides: list[str], *,
                     files_in: Path | None = None) -> tuple[dict, dict]:
    """The engine's schema on a run config: (tree, resolved), or a 422 naming the key. With `files_in` (the
    job's working directory on this machine) the data files the config names must exist there."""
    try:
        tree, resolved = run_config.validate(preset, config, overrides)
        if files_in is not None:
            run_config.check_data_files(tree, files_in)
    except RunConfigError as exc:
        raise config_error(exc) from None
    return tree, resolved
