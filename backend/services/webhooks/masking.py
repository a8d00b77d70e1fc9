"""A webhook's secrets as answers show them. A Slack URL's path *is* its secret (and a token in a query string is
common), so a URL is shown as its scheme and host only, with the path's last 4 characters when it is long enough
to keep most of it hidden; a token by its last 4 characters when it is long."""
from __future__ import annotations

from urllib.parse import urlsplit

HINT = 4
LONG = 16  # a path or token this long keeps 12+ characters hidden when its last 4 are shown


def mask_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:  # a malformed port: show nothing of it
        return "(hidden)"
    shown = f"{parts.scheme}://{host}{f':{port}' if port else ''}"
    rest = parts.path + (f"?{parts.query}" if parts.query else "")
    if rest and rest != "/":
        shown += "/…" + (rest[-HINT:] if len(rest) >= LONG else "")
    return shown


def token_hint(token: str | None) -> str | None:
    return "…" + token[-HINT:] if token and len(token) >= LONG else None


def scrub(text: str, url: str, token: str | None) -> str:
    """`text` (an error, an answer's body) without the URL's secret parts or the token in it."""
    try:
        parts = urlsplit(url)
        secrets = [url, parts.path + (f"?{parts.query}" if parts.query else ""), parts.query, parts.path]
    except ValueError:
        secrets = [url]
    secrets.append(token or "")
    for secret in sorted({s for s in secrets if len(s) > 1}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
