"""Webhooks (issue 35): health alarms and a run's end reach a person who is not looking at the page.

- `masking.py`: a webhook's URL and token as answers show them (never whole), and errors scrubbed of them;
- `outbox.py`: the events, written as delivery rows in the transaction that makes them happen (a run's terminal
  status, an alarm that fires or clears), so an event is sent exactly when its change is stored;
- `messages.py`: what is sent, in the Slack-compatible form (`{"text": ...}`) or the plain JSON form;
- `sender.py`: the delivery loop (an asyncio task of the server, off the request path): POSTs each due delivery,
  retries a failed one with exponential backoff, a bounded number of times.
"""
from backend.services.webhooks.outbox import on_alarm_changes, on_run_ended

__all__ = ["on_alarm_changes", "on_run_ended"]
