"""The application factory: settings -> migrations -> database -> routes -> Ray dispatch -> static UI."""
from __future__ import annotations

import asyncio
import logging
import re
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy.exc import DataError, IntegrityError
from starlette.exceptions import HTTPException as StarletteHTTPException

from backend import db
from backend.api.errors import validation_detail
from backend.api.json_body import guard_bodies
from backend.api.main import api_router, operation_id
from backend.api.routes.health import health_of
from backend.services.artifacts import safe_path
from backend.services.events import EventBus, prune_forever
from backend.settings import Settings

log = logging.getLogger("rlstudio")

API_PREFIX = "/api/v1"

NOT_BUILT = """<!doctype html><html><head><meta charset="utf-8"><title>rlstudio</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40em; margin: 4em auto">
<h1>rlstudio</h1><p>The web UI is not built (no <code>{dir}</code>).
Build it with <code>npm run build</code> in <code>frontend/</code>, or set <code>RLSTUDIO_FRONTEND_DIR</code>.</p>
<p>The API is up: see <a href="/docs">/docs</a> and <a href="/api/v1/runs">/api/v1/runs</a>.</p></body></html>"""


class RedactTokens(logging.Filter):
    """Access logs must not carry secrets: `?access_token=...` (SSE) is masked."""

    pattern = re.compile(r"(access_token=)[^&\s\"]+")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self.pattern.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
        return True


INT64 = (-(2**63), 2**63 - 1)


def _beyond_int64(value: str) -> bool:
    text = str(value).strip()
    return text.lstrip("+-").isdigit() and not INT64[0] <= int(text) <= INT64[1]


def _int_beyond_int64(value) -> list[str | int] | None:
    """Where in a parsed JSON body an integer is past 64 bits (the first one), or None."""
    stack: list[tuple[object, list]] = [(value, [])]
    while stack:
        node, path = stack.pop()
        if isinstance(node, int) and not isinstance(node, bool) and not INT64[0] <= node <= INT64[1]:
            return path
        if isinstance(node, (dict, list)):
            items = node.items() if isinstance(node, dict) else enumerate(node)
            stack.extend((item, [*path, key]) for key, item in reversed(list(items)))
    return None


def with_int64_bounds(schema: dict) -> dict:
    """State in the OpenAPI document what the API enforces on every integer it reads (parameters and request
    bodies): 64 bits (the database's integers; beyond them a 422 naming the field). Bounds a model declares stay,
    as exact integers."""

    def bound(node) -> None:
        if isinstance(node, dict):
            kinds = node.get("type")
            if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
                if "minimum" not in node and "exclusiveMinimum" not in node:
                    node["minimum"] = INT64[0]
                if "maximum" not in node and "exclusiveMaximum" not in node:
                    node["maximum"] = INT64[1]
            ref = node.get("$ref", "")
            if ref.startswith("#/components/schemas/") and ref not in seen:
                seen.add(ref)
                bound(components.get(ref.rsplit("/", 1)[1]))
            for child in node.values():
                bound(child)
        elif isinstance(node, list):
            for child in node:
                bound(child)

    components = schema.get("components", {}).get("schemas", {})
    seen: set[str] = set()
    exact_integer_bounds(schema)
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            if isinstance(operation, dict):
                bound(operation.get("parameters", []))
                bound(operation.get("requestBody", {}))
    return schema


def exact_integer_bounds(node) -> None:
    """FastAPI's OpenAPI models hold bounds as floats (2^63 - 1 becomes 2^63): integers' bounds become exact integers
    again, the 64-bit ones clamped to the database's integers (every bound here is below 2^53, a power of two or a
    64-bit extreme, so this is exact)."""
    if isinstance(node, dict):
        kinds = node.get("type")
        if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
            for key in ("minimum", "maximum"):
                if isinstance(node.get(key), float) and node[key].is_integer():
                    node[key] = min(max(int(node[key]), INT64[0]), INT64[1])
        for child in node.values():
            exact_integer_bounds(child)
    elif isinstance(node, list):
        for child in node:
            exact_integer_bounds(child)


def api_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the API declares for `path` (all its routes, as the OpenAPI document lists them)."""
    methods: set[str] = set()
    for route in app.router.routes:
        if isinstance(route, APIRoute) and route.include_in_schema and route.path_regex.match(path):
            methods |= route.methods
    return sorted(methods)


def mark_interrupted_imports(engine) -> None:
    """An import the last server (or an import command) did not finish is marked failed, saying so."""
    from sqlmodel import Session

    from backend.services.imports import mark_interrupted

    with Session(engine) as session:
        mark_interrupted(session)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.bus.bind(asyncio.get_running_loop())
        mark_interrupted_imports(app.state.engine)
        pruner = asyncio.create_task(prune_forever(app.state.engine, settings.events_retention_s))
        from backend.services.health.watch import sweep_forever

        stalls = asyncio.create_task(sweep_forever(app, settings.health_sweep_s))
        webhooks = None
        if settings.webhooks:
            from backend.services.webhooks.sender import WebhookSender

            webhooks = asyncio.create_task(WebhookSender(app.state.engine, settings, app.state.bus).run_forever())
        dispatcher = None
        if settings.dispatch:
            from backend.services.dispatch import Dispatcher

            dispatcher = Dispatcher(settings, app.state.engine, app.state.bus)
            app.state.dispatcher = dispatcher
            await dispatcher.start()
        try:
            yield
        finally:
            pruner.cancel()
            stalls.cancel()
            if webhooks is not None:
                webhooks.cancel()
            if dispatcher is not None:
                await dispatcher.shutdown()
            app.state.engine.dispose()

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.runs_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.db_url)

    app = FastAPI(title="rlstudio", version="0.1.0", lifespan=lifespan, generate_unique_id_function=operation_id,
                  description="Experiments, runs (launched as Ray jobs), metrics, samples, logs; live over SSE.")
    app.state.settings = settings
    app.state.engine = db.make_engine(settings.db_url)
    with app.state.engine.connect():  # first connection: WAL mode is set on the file from now on
        pass
    from backend.services.health.legacy import close_stale_step_one

    close_stale_step_one(app.state.engine)  # an older server's step-one alarms, firing for good: today's rules
    app.state.bus = EventBus()
    app.state.dispatcher = None
    logging.getLogger("uvicorn.access").addFilter(RedactTokens())

    if settings.cors_origins:  # off by default
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"],
                           allow_headers=["*"])

    @app.exception_handler(IntegrityError)
    async def integrity_error(_request: Request, exc: IntegrityError):
        return JSONResponse(status_code=409, content={"detail": "Conflicts with existing data (a unique field "
                                                                 "or a reference to something that does not exist)."})

    @app.exception_handler(DataError)
    async def data_error(request: Request, exc: DataError):
        # PostgreSQL refuses an integer beyond its BIGINT in the database (SQLSTATE 22003), where SQLite's driver
        # raises OverflowError in Python: the same 422. Any other data error stays a 500 (a bug to fix).
        if getattr(exc.orig, "sqlstate", None) == "22003":
            return await number_out_of_range(request, exc)
        raise exc

    @app.exception_handler(OverflowError)
    async def number_out_of_range(request: Request, exc: Exception):
        # e.g. an id or step beyond the database's 64-bit integers: name it when it is in the path, query or body
        named = [["path", k] for k, v in request.path_params.items() if _beyond_int64(v)]
        named += [["query", k] for k, v in request.query_params.multi_items() if _beyond_int64(v)]
        in_body = _int_beyond_int64(request.scope.get("rlstudio.body"))
        if in_body is not None:
            named.append(["body", *in_body])
        loc = named[0] if named else ["body"]
        where = f"{'.'.join(map(str, loc[1:]))}: " if named else ""
        return JSONResponse(status_code=422, content={"detail": [{
            "loc": loc, "type": "out_of_range", "msg": f"{where}a number is out of range (64-bit integers)."}]})

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError):
        # FastAPI's own answer echoes the input (a NaN cannot be encoded: a 500; a 10 MB string comes back whole)
        return JSONResponse(status_code=422, content={"detail": validation_detail(exc.errors())})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 405:  # Allow lists every method of the path, not only the first route's
            return JSONResponse({"detail": exc.detail}, status_code=405,
                                headers={"Allow": ", ".join(api_methods(app, request.url.path))})
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):  # e.g. bytes that are not UTF-8
            return JSONResponse(status_code=422, content={"detail": [{
                "loc": ["body"], "type": "json_invalid", "msg": "body: not valid JSON text (UTF-8)."}]})
        return await http_exception_handler(request, exc)

    app.include_router(api_router, prefix=API_PREFIX)

    @app.get("/healthz", include_in_schema=False)
    def healthz(request: Request):
        """Unauthenticated liveness for containers (the same as /api/v1/health, which needs the token)."""
        return health_of(request)

    frontend = Path(settings.frontend_dir)

    @app.get("/{path:path}", include_in_schema=False)
    def frontend_files(path: str):
        if path == "api" or path.startswith("api/"):
            allowed = api_methods(app, f"/{path}")
            if allowed:  # the path exists, GET is not one of its methods
                raise HTTPException(405, f"/{path} takes {', '.join(allowed)}, not GET.")
            raise HTTPException(404, f"No API route /{path}.")
        index = frontend / "index.html"
        if not index.is_file():
            return HTMLResponse(NOT_BUILT.format(dir=frontend), status_code=200)
        target = safe_path(frontend, path) if path else None
        return FileResponse(target or index)  # SPA fallback: unknown paths get the app, which routes them

    guard_bodies(app.routes)  # every body bounded and checked before a route reads it (backend/api/json_body.py)
    openapi = app.openapi

    def openapi_with_limits() -> dict:
        if app.openapi_schema is None:
            with_int64_bounds(openapi())
        return app.openapi_schema

    app.openapi = openapi_with_limits
    return app
