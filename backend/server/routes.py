"""The routes: the API under /api/v1 (backend/api/main.py: one router per resource), the unauthenticated liveness
probe, and the built web UI for every other path (an unknown path gets the app, which routes it)."""
from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.routing import APIRoute

from backend.api.main import api_router
from backend.api.routes.health import health_of
from backend.services.artifacts import safe_path

API_PREFIX = "/api/v1"
IMMUTABLE = "public, max-age=31536000, immutable"

NOT_BUILT = """<!doctype html><html><head><meta charset="utf-8"><title>rlstudio</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40em; margin: 4em auto">
<h1>rlstudio</h1><p>The web UI is not built (no <code>{dir}</code>).
Build it with <code>npm run build</code> in <code>frontend/</code>, or set <code>RLSTUDIO_FRONTEND_DIR</code>.</p>
<p>The API is up: see <a href="/docs">/docs</a> and <a href="/api/v1/runs">/api/v1/runs</a>.</p></body></html>"""


def api_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the API declares for `path` (all its routes, as the OpenAPI document lists them)."""
    methods: set[str] = set()
    for route in app.router.routes:
        if isinstance(route, APIRoute) and route.include_in_schema and route.path_regex.match(path):
            methods |= route.methods
    return sorted(methods)


def add_routes(app: FastAPI, frontend_dir: str | Path) -> None:
    app.include_router(api_router, prefix=API_PREFIX)

    @app.get("/healthz", include_in_schema=False)
    def healthz(request: Request):
        """Unauthenticated liveness for containers (the same as /api/v1/health, which needs the token)."""
        return health_of(request)

    frontend = Path(frontend_dir)

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
        if target and path.startswith("assets/"):
            # Vite names them by their content's hash: a browser may keep them for good, and asks nothing on a
            # later visit (without this it revalidated each script on every page load)
            return FileResponse(target, headers={"Cache-Control": IMMUTABLE})
        # SPA fallback: unknown paths get the app, which routes them; index.html is asked for again every time
        return FileResponse(target or index, headers={"Cache-Control": "no-cache"})
