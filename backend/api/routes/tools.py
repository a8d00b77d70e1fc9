"""A run's tools (multi-turn rollouts): the names its tool config declares and the ones its answers called."""
from __future__ import annotations

from fastapi import APIRouter

from backend.api.deps import SessionDep, get_run_or_404
from backend.models import RunTools
from backend.services import tools

router = APIRouter(tags=["tools"])


@router.get("/runs/{run_id}/tools", response_model=RunTools)
def list_run_tools(session: SessionDep, run_id: int):
    """Every tool of the run, by name: declared in its tool config (`actor_rollout_ref.rollout.multi_turn.
    tool_config_path`, read when the server has the file) and/or called in its logged answers, with how many
    answers called it. The Samples page's tool filter lists these."""
    run = get_run_or_404(session, run_id)
    return tools.run_tools(session, run)
