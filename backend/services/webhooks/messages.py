"""What a delivery says: one line of text per event (the Slack form is just that text; the JSON form carries it
beside the event's fields), and the body of each form. The text is built when the event happens (it is shown in
the delivery log); the run page's address is added when sent (it depends on the server's public URL)."""
from __future__ import annotations

from typing import Any

MARK = {"run.succeeded": "✅", "run.failed": "❌", "run.cancelled": "⏹", "run.stalled": "⏸", "alarm.cleared": "✔"}
DETAIL_CHARS = 300


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:DETAIL_CHARS]
    return ""


def _run_words(run: dict[str, Any]) -> str:
    name = f" “{run['name']}”" if run.get("name") else ""
    experiment = f" (experiment “{run['experiment']}”)" if run.get("experiment") else ""
    return f"Run {run['id']}{name}{experiment}"


def text_of(event: str, run: dict[str, Any], alarm: dict[str, Any] | None = None) -> str:
    who = _run_words(run)
    at = f" at step {run['step']}" if run.get("step") is not None else ""
    if event == "run.succeeded":
        return f"{MARK[event]} {who} succeeded{at}."
    if event in ("run.failed", "run.cancelled"):
        verb = {"lost": "was lost", "cancelled": "was cancelled"}.get(run.get("status"), "failed")
        why = _first_line(run.get("error"))
        return f"{MARK[event]} {who} {verb}{at}" + (f": {why}" if why else ".")
    alarm = alarm or {}
    title, detail = alarm.get("title") or alarm.get("id"), _first_line(alarm.get("detail"))
    if event == "alarm.cleared":
        return f"{MARK[event]} {who}: cleared at step {alarm.get('cleared_step')}: {title} (alarm {alarm.get('id')})."
    mark = MARK.get(event) or ("🛑" if alarm.get("severity") == "error" else "⚠️")
    verb = "stalled" if event == "run.stalled" else f"{alarm.get('severity', 'warning')}"
    return (f"{mark} {who} {verb}: {title} (alarm {alarm.get('id')}, since step {alarm.get('since_step')})"
            + (f". {detail}" if detail else "."))


def _slack_escape(text: str) -> str:
    # Slack's markup: these three are control characters in a message's text
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def body(form: str, payload: dict[str, Any], link: str) -> dict[str, Any]:
    """The JSON a webhook receives: `slack` -> {"text"}; `json` -> the event's fields with the run page's `url`."""
    if form == "slack":
        return {"text": f"{_slack_escape(payload.get('text', ''))} <{link}|Open the run>"}
    return {**payload, "url": link}
