"""The /api/v1 router: one router per resource; everything needs the API token when one is set
(ingest routes also take the run's own token)."""
from fastapi import APIRouter, Depends
from fastapi.routing import APIRoute

from backend.api.deps import require_user
from backend.api.errors import responses
from backend.api.routes import (
    config,
    events,
    experiments,
    health,
    imports,
    logs,
    metrics,
    run_health,
    runs,
    samples,
    tools,
    webhooks,
)

api_router = APIRouter()
user = [Depends(require_user)]

# Every error a router's operations may answer is declared (schemathesis checks responses against them).
auth = responses(401, 403)
api_router.include_router(health.router, dependencies=user, responses=auth)
api_router.include_router(config.router, dependencies=user, responses=responses(401, 403, 404))
api_router.include_router(experiments.router, dependencies=user, responses=responses(401, 403, 404, 409))
# before runs: /runs/events is not /runs/{id}
api_router.include_router(events.router, dependencies=user, responses=responses(401, 403, 404))
for module in (runs, metrics, samples, logs):
    api_router.include_router(module.router, dependencies=user, responses=responses(401, 403, 404, 409))
    # API token or the run's own ingest token
    api_router.include_router(module.ingest_router, responses=responses(401, 403, 404, 409, 413))
api_router.include_router(tools.router, dependencies=user, responses=responses(401, 403, 404))
api_router.include_router(run_health.router, dependencies=user, responses=responses(401, 403, 404))
api_router.include_router(imports.router, dependencies=user, responses=responses(401, 403, 413))
api_router.include_router(webhooks.router, dependencies=user, responses=responses(401, 403, 404))


def operation_id(route: APIRoute) -> str:
    """Short OpenAPI operation ids from the route function's name (`list_samples` -> `listSamples`), so the
    generated client says `sdk.listSamples` rather than FastAPI's `listSamplesApiV1RunsRunIdSamplesGet`."""
    head, *rest = route.name.split("_")
    return head + "".join(part.capitalize() for part in rest)
