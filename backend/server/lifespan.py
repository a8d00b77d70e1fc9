"""What runs while the server is up: the event pruner, the stall sweep, the webhook sender and the Ray dispatcher
(its head and its job reconciliation), started after the app is built and stopped, in turn, at shutdown."""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlmodel import Session

from backend.services.dispatch import Dispatcher
from backend.services.events import prune_forever
from backend.services.health.watch import sweep_forever
from backend.services.imports import mark_interrupted
from backend.services.webhooks.sender import WebhookSender
from backend.settings import Settings


def mark_interrupted_imports(engine) -> None:
    """An import the last server (or an import command) did not finish is marked failed, saying so."""
    with Session(engine) as session:
        mark_interrupted(session)


def lifespan_of(settings: Settings):
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.bus.bind(asyncio.get_running_loop())
        mark_interrupted_imports(app.state.engine)
        tasks = [asyncio.create_task(prune_forever(app.state.engine, settings.events_retention_s)),
                 asyncio.create_task(sweep_forever(app, settings.health_sweep_s))]
        if settings.webhooks:
            tasks.append(asyncio.create_task(
                WebhookSender(app.state.engine, settings, app.state.bus).run_forever()))
        dispatcher = None
        if settings.dispatch:
            dispatcher = app.state.dispatcher = Dispatcher(settings, app.state.engine, app.state.bus)
            await dispatcher.start()
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            if dispatcher is not None:
                await dispatcher.shutdown()
            app.state.engine.dispose()

    return lifespan
