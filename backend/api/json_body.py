"""Request bodies, read and checked once for every API route before FastAPI's own handling sees them
(`guard_bodies`, called by the app factory on all its routes):

- size: at most RLSTUDIO_MAX_REQUEST_BYTES on the ingest routes (metrics, samples, logs), RLSTUDIO_MAX_JSON_BYTES
  on every other route, else 413 `body: ...` (Content-Length is checked before reading; a chunked body is
  counted as it arrives and reading stops at the limit);
- type: a body is JSON, `Content-Type: application/json` (or `application/*+json`), else 422 naming `body`,
  also on a route that takes no body (a cancel with a stray body is refused rather than run);
- content: JSON as orjson reads it (UTF-8, finite numbers, no lone surrogates), nested at most MAX_DEPTH
  levels, else 422 whose `loc` names where (`["body", "config", "trainer", "lr"]`).

Non-finite numbers (`NaN`, `Infinity`, `-Infinity`, `1e309`) are not JSON. What a training run sends (the
ingest routes) and a run's config (create, fork) keep json_codec's reading: the literals (Python's json writes
them) become null, which those models document (a NaN metric value; a config or sample value nulled), and a
number past the float range is infinite. Every other route refuses them, naming the field.

The parsed value is what the route's `request.json()` returns: orjson (~10x the standard library on long float
arrays) on every body; the standard library, with hooks that mark what it finds, only on one orjson refused."""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import chain
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, request_response

from backend.api.errors import ErrorMessage, safe_text
from backend.models import LogsIngest, MetricsIngest, RunCreate, RunFork, RunStatusReport, SamplesIngest

MAX_DEPTH = 64  # levels of arrays/objects; run configs and sample extras use a handful
BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# bodies that may be large (RLSTUDIO_MAX_REQUEST_BYTES): a step's samples are megabytes
LARGE = (MetricsIngest, SamplesIngest, LogsIngest)
# bodies whose NaN / Infinity literals are read as null (see the module doc)
NON_FINITE_AS_NULL = (MetricsIngest, SamplesIngest, LogsIngest, RunStatusReport, RunCreate, RunFork)


class BodyError(Exception):
    """A refused body: 413 (detail: text) or 422 (detail: [{loc, msg, type}])."""

    def __init__(self, status: int, msg: str, loc: Iterable[str | int] = ("body",), kind: str = "json_invalid"):
        super().__init__(msg)
        self.status, self.msg, self.kind = status, msg, kind
        self.loc = [safe_text(part) if isinstance(part, str) else part for part in loc]

    def response(self) -> Response:
        if self.status == 413:
            return JSONResponse({"detail": self.msg}, status_code=413)
        return JSONResponse({"detail": [{"loc": self.loc, "msg": self.msg, "type": self.kind}]},
                            status_code=self.status)


def _where(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "body"


def invalid(path: tuple, what: str, kind: str) -> BodyError:
    return BodyError(422, f"{safe_text(_where(path))}: {what}", ("body", *path), kind)


# --- parsing ---------------------------------------------------------------------------------------------------


class _NotFinite:
    """Where the standard library met a number JSON cannot hold (strict bodies only)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def _strict_float(text: str) -> float | _NotFinite:
    value = float(text)
    return value if math.isfinite(value) else _NotFinite(text)


def _number_hooks(lenient: bool) -> dict[str, Callable[[str], Any]]:
    parse_float: Callable[[str], Any] = float if lenient else _strict_float
    return {"parse_float": parse_float,
            # a 100-digit integer is past 64 bits anyway; int() of a long one is slow (and refused past 4300)
            "parse_int": lambda text: int(text) if len(text) <= 100 else parse_float(text),
            "parse_constant": (lambda _text: None) if lenient else _NotFinite}


def _bad_unicode(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (`"\ud800"`): SQLite and the answer's encoding refuse it
        return True
    return False


def _first_problem(value: Any) -> BodyError | None:
    """What in a parsed body is not plain JSON (the first found, shallower first): a non-finite number marker, a
    string with a lone surrogate, nesting past MAX_DEPTH. Visits every value: only for bodies orjson refused, or
    that the quick depth check found too deep."""
    stack: list[tuple[Any, tuple]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if len(path) >= MAX_DEPTH:
            return invalid(path, f"nested deeper than {MAX_DEPTH} levels of arrays and objects", "json_too_deep")
        items = node.items() if type(node) is dict else enumerate(node)
        children = []
        for key, item in items:
            if type(key) is str and _bad_unicode(key):
                return invalid(path, f"the key '{safe_text(key)}' is not valid Unicode (a lone surrogate)",
                               "unicode_invalid")
            kind = type(item)
            if kind is dict or kind is list:
                children.append((item, (*path, key)))
            elif kind is str and _bad_unicode(item):
                return invalid((*path, key), "not valid Unicode (a lone surrogate)", "unicode_invalid")
            elif kind is _NotFinite:
                return invalid((*path, key), f"{safe_text(item.text, 40)} is not a JSON number (numbers are "
                                             "finite; send null or leave the field out)", "finite_number")
        stack.extend(reversed(children))
    return None


def _too_deep(value: Any) -> bool:
    """Whether containers nest past MAX_DEPTH. On every body, so in C loops where it can: a list of numbers or of
    strings is passed over with one sum / join, the objects of a list (a batch of points or samples) are looked
    into together, as one list of their values; a look at each item is left for lists that hold containers."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if type(node) is dict:
            node = node.values()
        else:
            try:
                sum(node)
                continue
            except (TypeError, OverflowError):
                try:
                    "".join(node)
                    continue
                except TypeError:
                    pass
        kinds = set(map(type, node))
        if kinds == {dict}:  # the objects are one level down; their values, all together, one more
            stack.append((list(chain.from_iterable(map(dict.values, node))), depth + 1))
        elif list in kinds or dict in kinds:
            stack.extend((item, depth + 1) for item in node if type(item) is list or type(item) is dict)
    return False


def parse(body: bytes, *, lenient: bool) -> Any:
    """A request body as JSON, or BodyError naming where it is not (see the module doc)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _parse_carefully(body, lenient)
    if type(value) in (list, dict) and _too_deep(value):
        raise _first_problem(value) or invalid((), f"nested deeper than {MAX_DEPTH} levels", "json_too_deep")
    return value


def _parse_carefully(body: bytes, lenient: bool) -> Any:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(422, f"body: not UTF-8 text (byte {exc.start})") from None
    try:
        value = json.loads(text, **_number_hooks(lenient))
    except json.JSONDecodeError as exc:
        raise BodyError(422, f"body: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise invalid((), f"nested deeper than {MAX_DEPTH} levels of arrays and objects", "json_too_deep") from None
    except ValueError as exc:  # e.g. a number the hooks cannot read
        raise BodyError(422, f"body: not valid JSON: {safe_text(str(exc))}") from None
    if type(value) is _NotFinite:
        raise invalid((), f"{safe_text(value.text, 40)} is not a JSON number", "finite_number")
    if type(value) is str and _bad_unicode(value):
        raise invalid((), "not valid Unicode (a lone surrogate)", "unicode_invalid")
    if type(value) in (list, dict):
        problem = _first_problem(value)
        if problem is not None:
            raise problem
    return value


# --- the guard on every route ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BodyPolicy:
    large: bool  # RLSTUDIO_MAX_REQUEST_BYTES instead of RLSTUDIO_MAX_JSON_BYTES
    lenient: bool  # NaN / Infinity literals read as null


def policy_of(route: APIRoute) -> BodyPolicy:
    model = route.body_field.field_info.annotation if route.body_field is not None else None
    is_model = isinstance(model, type)
    return BodyPolicy(large=is_model and issubclass(model, LARGE),
                      lenient=is_model and issubclass(model, NON_FINITE_AS_NULL))


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def read_body(request: Request, policy: BodyPolicy) -> None:
    """Read, bound and parse the body; what FastAPI then reads is this (request.body() / request.json())."""
    headers = request.headers
    length = headers.get("content-length")
    if length is None and "chunked" not in headers.get("transfer-encoding", "").lower():
        return  # no body
    settings = request.app.state.settings
    limit = settings.max_request_bytes if policy.large else settings.max_json_bytes
    too_large = BodyError(413, f"body: over {limit} bytes" + (
        " (RLSTUDIO_MAX_REQUEST_BYTES); send smaller batches." if policy.large else " (RLSTUDIO_MAX_JSON_BYTES)."))
    if length is not None and length.strip().isdigit() and int(length) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    body = request._body = b"".join(chunks)  # Starlette's own cache: what FastAPI's request.body() returns
    if not body:
        return
    content_type = headers.get("content-type")
    if not _is_json(content_type):
        got = f"not {safe_text(content_type, 80)}" if content_type else "the request has none"
        raise BodyError(422, f"body: send JSON, with Content-Type: application/json ({got}).", kind="content_type")
    request._json = parse(body, lenient=policy.lenient)  # what request.json() returns
    request.scope["rlstudio.body"] = request._json  # for errors raised later (a number past 64 bits)


def guard_bodies(routes: Iterable[Any]) -> None:
    """Put read_body in front of every API route that may carry a body, and declare its 413."""
    for route in routes:
        if not isinstance(route, APIRoute) or not route.methods & BODY_METHODS:
            continue
        if getattr(route.endpoint, "streams_body", False):  # an upload the route reads as a stream (imports)
            continue
        policy = policy_of(route)
        handler = route.get_route_handler()

        async def guarded(request: Request, handler=handler, policy=policy) -> Response:
            try:
                await read_body(request, policy)
            except BodyError as exc:
                return exc.response()
            return await handler(request)

        route.app = request_response(guarded)
        if route.body_field is not None and 413 not in route.responses:
            route.responses[413] = {"description": "a body over RLSTUDIO_MAX_JSON_BYTES (default 2 MiB)",
                                    "content": {"application/json": {"schema": {
                                        "$ref": f"#/components/schemas/{ErrorMessage.__name__}"}}}}
