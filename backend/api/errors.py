"""Errors the routes answer with: a 422 names the field (`detail[0].loc`, and `field` for config keys)."""
from __future__ import annotations

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


def unprocessable(loc: list[str | int], msg: str, kind: str = "value_error") -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=[{"loc": loc, "msg": msg, "type": kind}])


def config_error(exc: RunConfigError) -> HTTPException:
    loc = ["body"] + (["preset"] if exc.field == "preset" else ["config"] + (exc.field.split(".") if exc.field else []))
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                         detail=[{"loc": loc, "msg": exc.message, "type": "config_error", "field": exc.field}])


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
