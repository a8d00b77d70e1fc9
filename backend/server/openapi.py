"""The OpenAPI document states what the API enforces on every integer it reads: 64 bits (the database's integers;
beyond them a 422 naming the field)."""
from __future__ import annotations

from fastapi import FastAPI

INT64 = (-(2**63), 2**63 - 1)


def beyond_int64(value: str) -> bool:
    text = str(value).strip()
    return text.lstrip("+-").isdigit() and not INT64[0] <= int(text) <= INT64[1]


def int_beyond_int64(value) -> list[str | int] | None:
    """Where in a parsed JSON body an integer is past 64 bits (the first one), or None."""
    stack: list[tuple[object, list]] = [(value, [])]
    while stack:
        node, path = stack.pop()
        if isinstance(node, int) and not isinstance(node, bool) and not INT64[0] <= node <= INT64[1]:
            return path
        if isinstance(node, (dict, list)):
            items = node.items() if isinstance(node, dict) else enumerate(node)
            stack.extend((item, [*path, key]) for key, item in reversed(list(items)))
    return None


def with_int64_bounds(schema: dict) -> dict:
    """State in the OpenAPI document what the API enforces on every integer it reads (parameters and request
    bodies): 64 bits (the database's integers; beyond them a 422 naming the field). Bounds a model declares stay,
    as exact integers."""

    def bound(node) -> None:
        if isinstance(node, dict):
            kinds = node.get("type")
            if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
                if "minimum" not in node and "exclusiveMinimum" not in node:
                    node["minimum"] = INT64[0]
                if "maximum" not in node and "exclusiveMaximum" not in node:
                    node["maximum"] = INT64[1]
            ref = node.get("$ref", "")
            if ref.startswith("#/components/schemas/") and ref not in seen:
                seen.add(ref)
                bound(components.get(ref.rsplit("/", 1)[1]))
            for child in node.values():
                bound(child)
        elif isinstance(node, list):
            for child in node:
                bound(child)

    components = schema.get("components", {}).get("schemas", {})
    seen: set[str] = set()
    exact_integer_bounds(schema)
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            if isinstance(operation, dict):
                bound(operation.get("parameters", []))
                bound(operation.get("requestBody", {}))
    return schema


def exact_integer_bounds(node) -> None:
    """FastAPI's OpenAPI models hold bounds as floats (2^63 - 1 becomes 2^63): integers' bounds become exact integers
    again, the 64-bit ones clamped to the database's integers (every bound here is below 2^53, a power of two or a
    64-bit extreme, so this is exact)."""
    if isinstance(node, dict):
        kinds = node.get("type")
        if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
            for key in ("minimum", "maximum"):
                if isinstance(node.get(key), float) and node[key].is_integer():
                    node[key] = min(max(int(node[key]), INT64[0]), INT64[1])
        for child in node.values():
            exact_integer_bounds(child)
    elif isinstance(node, list):
        for child in node:
            exact_integer_bounds(child)


def with_integer_bounds(app: FastAPI) -> None:
    """The app's document, made once, with the bounds stated."""
    openapi = app.openapi

    def openapi_with_limits() -> dict:
        if app.openapi_schema is None:
            with_int64_bounds(openapi())
        return app.openapi_schema

    app.openapi = openapi_with_limits
