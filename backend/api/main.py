"""The /api/v1 router: one router per resource; everything needs the API token when one is set
(ingest routes also take the run's own token)."""
from fastapi import APIRouter, Depends
from fastapi.routing import APIRoute

from backend.api.deps import require_user
from backend.api.routes import config, events, experiments, health, logs, metrics, runs, samples

api_router = APIRouter()
user = [Depends(require_user)]

api_router.include_router(health.router, dependencies=user)
api_router.include_router(config.router, dependencies=user)
api_router.include_router(experiments.router, dependencies=user)
api_router.include_router(events.router, dependencies=user)  # before runs: /runs/events is not /runs/{id}
for module in (runs, metrics, samples, logs):
    api_router.include_router(module.router, dependencies=user)
    api_router.include_router(module.ingest_router)  # API token or the run's own ingest token


def operation_id(route: APIRoute) -> str:
    """Short OpenAPI operation ids from the route function's name (`list_samples` -> `listSamples`), so the
    generated client says `sdk.listSamples` rather than FastAPI's `listSamplesApiV1RunsRunIdSamplesGet`."""
    head, *rest = route.name.split("_")
    return head + "".join(part.capitalize() for part in rest)
