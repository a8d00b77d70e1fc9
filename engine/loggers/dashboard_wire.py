"""What the dashboard logger puts on the wire: JSON-safe values, the request body, one POST with the server's
refusals told apart from failures worth retrying. Standard library only (orjson when installed)."""
from __future__ import annotations

import http.client
import json
import math
import urllib.error
import urllib.request
from typing import Any

RETRYABLE = {408, 429}


class ServerRefused(Exception):
    """The server answered with a 4xx that retrying will not fix."""


def dumps(body: dict) -> bytes:
    """The request body: orjson when installed (a step's samples are megabytes of floats), else json."""
    try:
        import orjson
    except ImportError:
        return json.dumps(body).encode()
    return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)


def plain(value: Any) -> Any:
    """Tensors / numpy values / nested containers -> JSON-safe Python (non-finite floats -> None)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    elif hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        try:  # plain numbers, all finite (their sum is): nothing to convert, one C loop instead of a call each
            if math.isfinite(sum(value)) and set(map(type, value)) <= {int, float}:
                return list(value)
        except (TypeError, OverflowError):
            if set(map(type, value)) == {str}:  # e.g. the tokens' texts
                return list(value)
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def metric_value(value: Any) -> Any:
    value = float(value.item() if hasattr(value, "item") else value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def post_json(url: str, body: dict, token: str | None, timeout: float) -> dict:
    data = dumps(body)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode() or "{}"
            return json.loads(text)
    except http.client.HTTPException as exc:
        # e.g. IncompleteRead: the server died mid-answer; it may have stored the request (re-sending is safe)
        raise ConnectionError(f"{type(exc).__name__}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise RuntimeError(f"unreadable answer from {url}: {exc}") from None
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        if 400 <= exc.code < 500 and exc.code not in RETRYABLE:
            raise ServerRefused(f"HTTP {exc.code}: {detail}") from None
        raise RuntimeError(f"HTTP {exc.code}: {detail}") from None
