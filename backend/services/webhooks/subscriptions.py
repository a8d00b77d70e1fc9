"""Webhooks as the API reads and writes them: create (for an experiment or a run), list, edit, delete, and a run's
delivery log. Answers carry the URL and token masked (masking.py)."""
from __future__ import annotations

from sqlalchemy import or_, update
from sqlmodel import Session, func, select

from backend.models import Run, Webhook, WebhookDelivery, WebhookDeliveryPublic, WebhookPublic
from backend.services.webhooks.masking import mask_url, token_hint


def public(hook: Webhook) -> WebhookPublic:
    return WebhookPublic(id=hook.id, name=hook.name, format=hook.format, events=hook.events, enabled=hook.enabled,
                         experiment_id=hook.experiment_id, run_id=hook.run_id, url_masked=mask_url(hook.url),
                         has_token=bool(hook.token), token_hint=token_hint(hook.token), created_at=hook.created_at)


def create(*, session: Session, fields: dict, experiment_id: int | None = None, run_id: int | None = None) -> Webhook:
    hook = Webhook(**fields, experiment_id=experiment_id, run_id=run_id)
    session.add(hook)
    session.commit()
    return hook


def listed(*, session: Session, experiment_id: int | None = None, run_id: int | None = None,
           applying_to: Run | None = None) -> list[Webhook]:
    """Webhooks by scope (`experiment_id`, `run_id`: exactly those), or every one that tells `applying_to` (its own
    and its experiment's)."""
    stmt = select(Webhook)
    if applying_to is not None:
        stmt = stmt.where(or_(Webhook.run_id == applying_to.id, Webhook.experiment_id == applying_to.experiment_id))
    if experiment_id is not None:
        stmt = stmt.where(Webhook.experiment_id == experiment_id)
    if run_id is not None:
        stmt = stmt.where(Webhook.run_id == run_id)
    return list(session.exec(stmt.order_by(Webhook.id)).all())


def edit(*, session: Session, hook: Webhook, changes: dict) -> Webhook:
    if changes.get("token") == "":
        changes["token"] = None
    hook.sqlmodel_update(changes)
    session.add(hook)
    session.commit()
    return hook


def remove(*, session: Session, hook: Webhook) -> None:
    """The webhook goes; its deliveries stay in their runs' logs (without it: those not sent yet are not sent)."""
    session.exec(update(WebhookDelivery).where(WebhookDelivery.webhook_id == hook.id).values(webhook_id=None))
    session.delete(hook)
    session.commit()


def deliveries(*, session: Session, run_id: int, skip: int, limit: int) -> tuple[list[WebhookDeliveryPublic], int]:
    where = WebhookDelivery.run_id == run_id
    count = session.exec(select(func.count()).select_from(WebhookDelivery).where(where)).one()
    rows = session.exec(select(WebhookDelivery).where(where).order_by(WebhookDelivery.id.desc())
                        .offset(skip).limit(limit)).all()
    return [WebhookDeliveryPublic.model_validate(r) for r in rows], count
