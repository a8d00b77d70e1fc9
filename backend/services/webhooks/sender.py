"""The delivery loop: one asyncio task of the server, off every request's path. It sends each due delivery (a POST
of JSON), records the outcome on the delivery row (and tells the run's live feed), and retries one that failed for a
reason that may pass (no answer, a timeout, a 5xx, 408, 429) after `backoff_s` x 2^(attempt - 1) seconds (at most
MAX_BACKOFF_S), until `attempts` attempts were made; a refusal (another 4xx) or a redirect (not followed: the
address is the subscriber's to fix) fails at once. It is woken by every commit that writes a feed event (what a run's
end and an alarm's change always do) and looks every POLL_S seconds besides. Deliveries left pending by a stopped
server are sent when it starts again: each event is sent at least once."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import func
from sqlmodel import Session, select

from backend.models import Webhook, WebhookDelivery, WebhookDeliveryPublic
from backend.models.common import utcnow
from backend.services.events import add_event, run_channel, wake_on_commit
from backend.services.webhooks import messages
from backend.services.webhooks.masking import scrub

log = logging.getLogger("rlstudio")

POLL_S = 1.0
BATCH = 20
MAX_BACKOFF_S = 300.0
WAITING = ("pending", "retrying")
ERROR_CHARS = 300


@dataclass
class Attempt:
    id: int
    run_id: int
    event: str
    payload: dict[str, Any]
    url: str | None  # None: the webhook was deleted before it was sent
    token: str | None
    form: str


def backoff(attempts: int, base_s: float) -> float:
    """The wait before the next attempt, after `attempts` failed ones."""
    return min(base_s * 2 ** (attempts - 1), MAX_BACKOFF_S)


class WebhookSender:
    def __init__(self, engine, settings, bus):
        self.engine, self.settings, self.bus = engine, settings, bus

    async def run_forever(self) -> None:
        waiter = self.bus.waiter()
        # redirects are not followed: the address is the subscriber's to fix, and a 3xx must not carry the token on
        async with httpx.AsyncClient(timeout=self.settings.webhook_timeout_s, follow_redirects=False,
                                     headers={"User-Agent": "rlstudio-webhooks"}) as http:
            try:
                while True:
                    waiter.clear()  # before the query: a commit during it is not missed
                    due, next_due = [], None
                    try:
                        due, next_due = await asyncio.to_thread(self._due)
                        if due:
                            await asyncio.gather(*(self._deliver(http, a) for a in due))
                            continue  # more may be due
                    except Exception:  # the loop must outlive a bad row or a database hiccup: say so, go on
                        log.exception("webhooks: a delivery round failed")
                    wait = POLL_S if next_due is None else min(POLL_S, max(0.0, next_due - time.time()))
                    try:
                        await asyncio.wait_for(waiter.wait(), timeout=wait)
                    except asyncio.TimeoutError:
                        pass
            finally:
                self.bus.release(waiter)

    def _due(self) -> tuple[list[Attempt], float | None]:
        now = time.time()
        with Session(self.engine) as session:
            rows = session.exec(
                select(WebhookDelivery, Webhook).outerjoin(Webhook, Webhook.id == WebhookDelivery.webhook_id)
                .where(WebhookDelivery.state.in_(WAITING), WebhookDelivery.next_attempt_at <= now)
                .order_by(WebhookDelivery.id).limit(BATCH)).all()
            later = session.exec(select(func.min(WebhookDelivery.next_attempt_at)).where(
                WebhookDelivery.state.in_(WAITING), WebhookDelivery.next_attempt_at > now)).one()
        return [Attempt(d.id, d.run_id, d.event, d.payload, w.url if w else None, w.token if w else None,
                        w.format if w else "json") for d, w in rows], later

    async def _deliver(self, http: httpx.AsyncClient, attempt: Attempt) -> None:
        if attempt.url is None:
            await asyncio.to_thread(self._record, attempt, None, "the webhook was deleted before this was sent", True)
            return
        link = f"{self.settings.server_url}/runs/{attempt.run_id}"
        headers = {"X-Rlstudio-Event": attempt.event}
        if attempt.token:
            headers["Authorization"] = f"Bearer {attempt.token}"
        status, error, final = None, None, False
        try:
            response = await http.post(attempt.url, json=messages.body(attempt.form, attempt.payload, link),
                                       headers=headers)
            status = response.status_code
            if not 200 <= status < 300:
                retried = status >= 500 or status in (408, 429)
                final = not retried
                reason = "a redirect (not followed)" if 300 <= status < 400 else (
                    "retried" if retried else "refused: not retried")
                error = f"HTTP {status}, {reason}: {response.text[:ERROR_CHARS]}".rstrip(": ")
        except httpx.HTTPError as exc:  # no answer: refused, reset, timed out, a bad address
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if error is not None:
            error = scrub(error, attempt.url, attempt.token)[:ERROR_CHARS + 100]
        await asyncio.to_thread(self._record, attempt, status, error, final)

    def _record(self, attempt: Attempt, status: int | None, error: str | None, final: bool) -> None:
        with Session(self.engine, expire_on_commit=False) as session:
            wake_on_commit(session, self.bus)
            row = session.get(WebhookDelivery, attempt.id)
            if row is None:  # its run was deleted meanwhile
                return
            row.attempts += 1
            row.last_status, row.last_error = status, error
            if error is None:
                row.state, row.delivered_at, row.next_attempt_at = "delivered", utcnow(), None
            elif final or row.attempts >= self.settings.webhook_attempts:
                row.state, row.next_attempt_at = "failed", None
            else:
                row.state = "retrying"
                row.next_attempt_at = time.time() + backoff(row.attempts, self.settings.webhook_backoff_s)
            session.add(row)
            # the run page's delivery log updates live
            add_event(session, run_channel(row.run_id), "webhook",
                      WebhookDeliveryPublic.model_validate(row).model_dump(mode="json"))
            session.commit()
