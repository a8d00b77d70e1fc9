"""A route class whose JSON bodies are parsed by backend.json_codec (orjson) instead of the standard library:
the ingest routes receive megabytes of float arrays per request."""
from __future__ import annotations

from typing import Any, Callable

from fastapi import Request, Response
from fastapi.routing import APIRoute

from backend import json_codec


class FastJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json_codec.loads(await self.body())
        return self._json


class FastJSONRoute(APIRoute):
    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def route_handler(request: Request) -> Response:
            return await handler(FastJSONRequest(request.scope, request.receive))

        return route_handler
