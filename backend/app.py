"""The application factory: settings -> migrations -> database -> middleware, error handlers, routes -> the
background tasks while it runs (backend/server/: each part in its module)."""
from __future__ import annotations

from fastapi import FastAPI

from backend import db
from backend.api.main import operation_id
from backend.server.error_handlers import add_error_handlers
from backend.server.lifespan import lifespan_of
from backend.server.middleware import add_middleware, guard_request_bodies
from backend.server.openapi import with_integer_bounds
from backend.server.routes import add_routes
from backend.services.events import EventBus
from backend.services.health.legacy import close_stale_step_one
from backend.settings import Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.runs_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.db_url)

    app = FastAPI(title="rlstudio", version="0.1.0", lifespan=lifespan_of(settings),
                  generate_unique_id_function=operation_id,
                  description="Experiments, runs (launched as Ray jobs), metrics, samples, logs; live over SSE.")
    app.state.settings = settings
    app.state.engine = db.make_engine(settings.db_url)
    with app.state.engine.connect():  # first connection: WAL mode is set on the file from now on
        pass
    close_stale_step_one(app.state.engine)  # an older server's step-one alarms, firing for good: today's rules
    app.state.bus = EventBus()
    app.state.dispatcher = None

    add_middleware(app, settings)
    add_error_handlers(app)
    add_routes(app, settings.frontend_dir)
    guard_request_bodies(app)
    with_integer_bounds(app)
    return app
