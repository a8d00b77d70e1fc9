"""Errors turned into answers: a conflict is a 409, a number past the database's 64-bit integers a 422 naming
where it is, a refused request a 422 that does not echo the input, a 405 that lists every method of its path."""
from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, IntegrityError
from starlette.exceptions import HTTPException as StarletteHTTPException

from backend.api.errors import validation_detail
from backend.server.openapi import beyond_int64, int_beyond_int64
from backend.server.routes import api_methods


async def integrity_error(_request: Request, exc: IntegrityError):
    return JSONResponse(status_code=409, content={"detail": "Conflicts with existing data (a unique field "
                                                             "or a reference to something that does not exist)."})


async def data_error(request: Request, exc: DataError):
    # PostgreSQL refuses an integer beyond its BIGINT in the database (SQLSTATE 22003), where SQLite's driver
    # raises OverflowError in Python: the same 422. Any other data error stays a 500 (a bug to fix).
    if getattr(exc.orig, "sqlstate", None) == "22003":
        return await number_out_of_range(request, exc)
    raise exc


async def number_out_of_range(request: Request, exc: Exception):
    # e.g. an id or step beyond the database's 64-bit integers: name it when it is in the path, query or body
    named = [["path", k] for k, v in request.path_params.items() if beyond_int64(v)]
    named += [["query", k] for k, v in request.query_params.multi_items() if beyond_int64(v)]
    in_body = int_beyond_int64(request.scope.get("rlstudio.body"))
    if in_body is not None:
        named.append(["body", *in_body])
    loc = named[0] if named else ["body"]
    where = f"{'.'.join(map(str, loc[1:]))}: " if named else ""
    return JSONResponse(status_code=422, content={"detail": [{
        "loc": loc, "type": "out_of_range", "msg": f"{where}a number is out of range (64-bit integers)."}]})


async def invalid_request(_request: Request, exc: RequestValidationError):
    # FastAPI's own answer echoes the input (a NaN cannot be encoded: a 500; a 10 MB string comes back whole)
    return JSONResponse(status_code=422, content={"detail": validation_detail(exc.errors())})


async def http_error(request: Request, exc: StarletteHTTPException):
    if exc.status_code == 405:  # Allow lists every method of the path, not only the first route's
        return JSONResponse({"detail": exc.detail}, status_code=405,
                            headers={"Allow": ", ".join(api_methods(request.app, request.url.path))})
    if exc.status_code == 400 and "parsing the body" in str(exc.detail):  # e.g. bytes that are not UTF-8
        return JSONResponse(status_code=422, content={"detail": [{
            "loc": ["body"], "type": "json_invalid", "msg": "body: not valid JSON text (UTF-8)."}]})
    return await http_exception_handler(request, exc)


def add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(IntegrityError, integrity_error)
    app.add_exception_handler(DataError, data_error)
    app.add_exception_handler(OverflowError, number_out_of_range)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)
