"""Webhooks (issue 35): a subscription of an experiment's runs or of one run to its health alarms and its end, and
the log of each delivery. The URL and the token are secrets: stored whole (they are needed to send), never
answered whole (`url_masked`, `token_hint`)."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import StringConstraints
from sqlalchemy import Column, ForeignKey, Index, String, Text
from sqlmodel import Field, SQLModel

from backend.models.common import BigInt, JSONType, UTCDateTime, utcnow

# What a webhook may be told. `run.stalled` is the health alarm `stalled` firing (its clearing is `alarm.cleared`);
# `run.failed` includes a run `lost` (its job ended without a word).
WebhookEvent = Literal["alarm.fired", "alarm.cleared", "run.succeeded", "run.failed", "run.cancelled", "run.stalled"]
EVENTS: tuple[str, ...] = WebhookEvent.__args__
# slack: `{"text": ...}` (Slack's incoming webhooks, Mattermost, Discord's /slack endpoint, Teams workflows); json: the
# event as data (`event`, `run`, `alarm`, `text`, `url`).
WebhookFormat = Literal["slack", "json"]
DeliveryState = Literal["pending", "retrying", "delivered", "failed"]
# (sqlmodel's `regex=` is not applied under pydantic 2: the pattern is on the type)
# (ASCII classes, not \s: "whitespace" differs between regular-expression engines, e.g. on U+0085)
Url = Annotated[str, StringConstraints(min_length=10, max_length=2000,
                                       pattern=r"^https?://[^\x00-\x20/?#]+([/?#][^\x00-\x20]*)?$")]


class WebhookFields(SQLModel):
    name: str = Field(default="", max_length=200, description="what it is for, shown in lists")
    format: WebhookFormat = Field(default="json", description=(
        "`slack`: a Slack-compatible `{\"text\": ...}`; `json`: the event's fields (`event`, `text`, `run`, "
        "`alarm`, `url`)"))
    events: list[WebhookEvent] = Field(default_factory=lambda: list(EVENTS), min_length=1, max_length=len(EVENTS),
                                       description="what to send (default: all)", sa_type=JSONType)
    enabled: bool = True


class WebhookCreate(WebhookFields):
    url: Url = Field(description=(
        "where to POST (http or https); kept secret: answers show it masked"))
    token: str | None = Field(default=None, min_length=1, max_length=500, description=(
        "sent as `Authorization: Bearer <token>` with each delivery; kept secret: answers show its last 4 "
        "characters at most"))


class WebhookUpdate(SQLModel):
    name: str | None = Field(default=None, max_length=200)
    format: WebhookFormat | None = None
    events: list[WebhookEvent] | None = Field(default=None, min_length=1, max_length=len(EVENTS))
    enabled: bool | None = None
    url: Url | None = None
    token: str | None = Field(default=None, max_length=500, description="a new token; \"\" removes it")


class Webhook(WebhookFields, table=True):
    __table_args__ = {"sqlite_autoincrement": True}
    id: int | None = Field(default=None, primary_key=True, sa_type=BigInt)
    experiment_id: int | None = Field(default=None, sa_column=Column(
        BigInt, ForeignKey("experiment.id", ondelete="CASCADE"), nullable=True, index=True))
    run_id: int | None = Field(default=None, sa_column=Column(
        BigInt, ForeignKey("run.id", ondelete="CASCADE"), nullable=True, index=True))
    format: str = Field(default="json", sa_column=Column(String(10), nullable=False))
    url: str = Field(sa_column=Column(Text, nullable=False))
    token: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class WebhookPublic(WebhookFields):
    id: int
    experiment_id: int | None = Field(description="set for an experiment's webhook (every run of it)")
    run_id: int | None = Field(description="set for one run's webhook")
    url_masked: str = Field(description="scheme and host; the path and query (often the secret) hidden")
    has_token: bool
    token_hint: str | None = Field(description="the token's last 4 characters (long tokens only), else null")
    created_at: datetime


class WebhooksPublic(SQLModel):
    data: list[WebhookPublic]
    count: int


class WebhookDelivery(SQLModel, table=True):
    """One event for one webhook: sent off the request path, retried with backoff until delivered or given up."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (Index("ix_webhook_delivery_due", "state", "next_attempt_at"),
                      {"sqlite_autoincrement": True})
    id: int | None = Field(default=None, primary_key=True, sa_type=BigInt)
    webhook_id: int | None = Field(default=None, sa_column=Column(
        BigInt, ForeignKey("webhook.id", ondelete="SET NULL"), nullable=True))
    run_id: int = Field(sa_column=Column(BigInt, ForeignKey("run.id", ondelete="CASCADE"), nullable=False,
                                         index=True))
    event: str = Field(sa_column=Column(String(40), nullable=False))
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSONType, nullable=False))
    url_masked: str = Field(default="", sa_column=Column(Text, nullable=False))
    state: str = Field(default="pending", sa_column=Column(String(10), nullable=False))
    attempts: int = Field(default=0, sa_type=BigInt)
    next_attempt_at: float | None = None
    last_status: int | None = Field(default=None, sa_type=BigInt)
    last_error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    delivered_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class WebhookDeliveryPublic(SQLModel):
    id: int
    webhook_id: int | None = Field(description="null once the webhook was deleted")
    run_id: int
    event: WebhookEvent
    payload: dict[str, Any] = Field(description="the event as sent (the json form's body)")
    url_masked: str
    state: DeliveryState = Field(description="pending (not sent yet), retrying (an attempt failed; another is "
                                 "due at next_attempt_at), delivered (a 2xx answer), failed (given up)")
    attempts: int
    next_attempt_at: float | None
    last_status: int | None = Field(description="the HTTP status of the last attempt (null: no answer)")
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None


class WebhookDeliveriesPublic(SQLModel):
    data: list[WebhookDeliveryPublic]
    count: int
