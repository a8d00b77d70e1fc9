"""Webhooks (issue 35): subscribe an experiment (every run of it) or one run to its health alarms and its end; list,
edit, delete them; a run's delivery log. The URL and token are never answered whole."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlmodel import Session

from backend.api.deps import SessionDep, get_run_or_404
from backend.models import (
    Experiment,
    Webhook,
    WebhookCreate,
    WebhookDeliveriesPublic,
    WebhookPublic,
    WebhooksPublic,
    WebhookUpdate,
)
from backend.services.webhooks import subscriptions

router = APIRouter(tags=["webhooks"])


def _get(session: Session, webhook_id: int) -> Webhook:
    hook = session.get(Webhook, webhook_id)
    if hook is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"Webhook {webhook_id} not found.")
    return hook


@router.post("/experiments/{experiment_id}/webhooks", response_model=WebhookPublic,
             status_code=status.HTTP_201_CREATED)
def create_experiment_webhook(session: SessionDep, experiment_id: int, body: WebhookCreate):
    """Tell `url` about every run of this experiment (those to come too): alarms that fire or clear, and each run's
    end (`events`, default all)."""
    if session.get(Experiment, experiment_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"Experiment {experiment_id} not found.")
    return subscriptions.public(subscriptions.create(session=session, fields=body.model_dump(),
                                                     experiment_id=experiment_id))


@router.post("/runs/{run_id}/webhooks", response_model=WebhookPublic, status_code=status.HTTP_201_CREATED)
def create_run_webhook(session: SessionDep, run_id: int, body: WebhookCreate):
    """Tell `url` about this run: alarms that fire or clear, and its end (`events`, default all)."""
    get_run_or_404(session, run_id)
    return subscriptions.public(subscriptions.create(session=session, fields=body.model_dump(), run_id=run_id))


@router.get("/webhooks", response_model=WebhooksPublic)
def list_webhooks(session: SessionDep, experiment_id: int | None = None,
                  run_id: Annotated[int | None, Query(description="a run's own webhooks (not its experiment's)")]
                  = None):
    rows = subscriptions.listed(session=session, experiment_id=experiment_id, run_id=run_id)
    return WebhooksPublic(data=[subscriptions.public(h) for h in rows], count=len(rows))


@router.get("/runs/{run_id}/webhooks", response_model=WebhooksPublic)
def list_run_webhooks(session: SessionDep, run_id: int):
    """Every webhook that tells this run's news: its own and its experiment's."""
    run = get_run_or_404(session, run_id)
    rows = subscriptions.listed(session=session, applying_to=run)
    return WebhooksPublic(data=[subscriptions.public(h) for h in rows], count=len(rows))


@router.get("/webhooks/{webhook_id}", response_model=WebhookPublic)
def get_webhook(session: SessionDep, webhook_id: int):
    return subscriptions.public(_get(session, webhook_id))


@router.patch("/webhooks/{webhook_id}", response_model=WebhookPublic)
def update_webhook(session: SessionDep, webhook_id: int, body: WebhookUpdate):
    hook = _get(session, webhook_id)
    changes = {k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None}
    return subscriptions.public(subscriptions.edit(session=session, hook=hook, changes=changes))


@router.delete("/webhooks/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_webhook(session: SessionDep, webhook_id: int):
    """The webhook goes; what it was sent stays in the runs' delivery logs."""
    subscriptions.remove(session=session, hook=_get(session, webhook_id))


@router.get("/runs/{run_id}/webhook-deliveries", response_model=WebhookDeliveriesPublic)
def list_webhook_deliveries(session: SessionDep, run_id: int, skip: Annotated[int, Query(ge=0)] = 0,
                            limit: Annotated[int, Query(ge=1, le=1000)] = 100):
    """The run's delivery log, newest first: each event sent to each webhook, its state, attempts and last answer.
    The run's SSE stream sends a `webhook` event (one delivery) whenever an attempt ends."""
    get_run_or_404(session, run_id)
    rows, count = subscriptions.deliveries(session=session, run_id=run_id, skip=skip, limit=limit)
    return WebhookDeliveriesPublic(data=rows, count=count)
