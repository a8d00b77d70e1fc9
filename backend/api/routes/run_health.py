"""A run's health (issue 28): every alarm judged on the server as its metrics and samples arrive
(backend/services/health/), the prompts that never gave a learning signal; and the helper that stops the Ray job
of a run its auto-stop rule cancelled."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from sqlmodel import Session

from backend.api.deps import SessionDep, get_run_or_404
from backend.models import NoSignalPrompts, RunHealth
from backend.services import health
from backend.services.health import STOP_JOB

router = APIRouter(tags=["health"])


@router.get("/runs/{run_id}/health", response_model=RunHealth)
async def get_run_health(request: Request, session: SessionDep, run_id: int):
    """Each alarm that fired for this run (firing since `since_step`, or cleared at `cleared_step`, with the numbers
    that triggered it), the worst firing severity as `status`, and every threshold. An active run is also judged
    for a stall now. The run's SSE stream pushes the same body as a `health` event whenever it changes."""
    from starlette.concurrency import run_in_threadpool

    def judged():
        run = get_run_or_404(session, run_id)
        job = health.refresh_stalled(session, run)
        return job, health.report(session, run_id)

    job, body = await run_in_threadpool(judged)
    await stop_job(request, job)
    return body


@router.get("/runs/{run_id}/health/no-signal", response_model=NoSignalPrompts)
def list_no_signal_prompts(session: SessionDep, run_id: int,
                           limit: Annotated[int, Query(ge=1, le=1000)] = 100):
    """The prompts whose GRPO groups gave no learning signal at any step judged (every answer scored alike), with
    their answers at the last of those steps; a step is judged once the next step's answers arrive, or the run
    ended (its last step)."""
    health.close_ended(session, get_run_or_404(session, run_id))
    data, count = health.no_signal_prompts(session, run_id, limit=limit)
    return NoSignalPrompts(data=data, count=count)


async def stop_job(request: Request, submission_id: str | None) -> None:
    """Stop the Ray job of a run its health rule cancelled (the status is already `cancelled`)."""
    dispatcher = getattr(request.app.state, "dispatcher", None)
    if submission_id and dispatcher is not None:
        await dispatcher.stop_job(submission_id)


def stop_asked(session: Session) -> str | None:
    return session.info.pop(STOP_JOB, None)
