"""Errors the routes answer with: a 422 names the field (`detail[0].loc`, and `field` for config keys)."""
from __future__ import annotations

from typing import Any

from fastapi import HTTPException, status

from backend.services import run_config
from backend.services.run_config import RunConfigError


def unprocessable(loc: list[str | int], msg: str, kind: str = "value_error") -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=[{"loc": loc, "msg": msg, "type": kind}])


def config_error(exc: RunConfigError) -> HTTPException:
    loc = ["body"] + (["preset"] if exc.field == "preset" else ["config"] + (exc.field.split(".") if exc.field else []))
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                         detail=[{"loc": loc, "msg": exc.message, "type": "config_error", "field": exc.field}])


def validated_config(preset: str | None, config: dict[str, Any], overrides: list[str]) -> tuple[dict, dict]:
    """The engine's schema on a run config: (tree, resolved), or a 422 naming the key."""
    try:
        return run_config.validate(preset, config, overrides)
    except RunConfigError as exc:
        raise config_error(exc) from None
