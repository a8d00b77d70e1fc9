"""A server that other machines can reach never runs without an API token: a run's config can name Python to
run on the machine (`custom_reward_function.path`, `trust_remote_code`), so an open port would be an open
shell (as Ray's job API was: ShadowRay, CVE-2023-48022). Bound to anything but loopback without
RLSTUDIO_API_TOKEN, the server generates a token, keeps it in DATA_DIR/api_token (owner-only) so a restart
keeps the browser's copy valid, and prints it once, when it is made (as Jupyter does)."""
from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path

from pydantic import SecretStr

from backend.settings import Settings

TOKEN_FILE = "api_token"


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost may resolve to anything: treat it as reachable
        return False


def ensure_api_token(settings: Settings) -> str | None:
    """Sets `settings.api_token` when the server is reachable from other machines and none is configured;
    returns what to tell the user (None: nothing to say)."""
    if settings.api_token is not None or is_loopback(settings.host):
        return None
    path = (settings.data_dir / TOKEN_FILE).resolve()
    how = ("Requests need 'Authorization: Bearer <token>'; in the web UI paste it on the Settings page (/settings). "
           "To choose your own, set RLSTUDIO_API_TOKEN.")
    token = _read(path)
    if token:
        settings.api_token = SecretStr(token)
        return (f"rlstudio: listening on {settings.host}, reachable from other machines: the API needs the token "
                f"kept in {path} (made on an earlier start). {how}")
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    settings.api_token = SecretStr(token)
    return (f"rlstudio: listening on {settings.host}, reachable from other machines, and RLSTUDIO_API_TOKEN is not "
            f"set, so the API needs this generated token (printed only now; kept in {path}):\n\n    {token}\n\n{how}")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None
