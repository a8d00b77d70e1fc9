"""What wraps every request: CORS (off by default), the access log without secrets, and every JSON body bounded
and checked before a route reads it (backend/api/json_body.py)."""
from __future__ import annotations

import logging
import re

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from backend.api.json_body import guard_bodies
from backend.settings import Settings


class RedactTokens(logging.Filter):
    """Access logs must not carry secrets: `?access_token=...` (SSE) is masked."""

    pattern = re.compile(r"(access_token=)[^&\s\"]+")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self.pattern.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
        return True


def add_middleware(app: FastAPI, settings: Settings) -> None:
    logging.getLogger("uvicorn.access").addFilter(RedactTokens())
    if settings.cors_origins:  # off by default
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"],
                           allow_headers=["*"])


def guard_request_bodies(app: FastAPI) -> None:
    """After every route is added: each body bounded and checked before a route reads it."""
    guard_bodies(app.routes)
