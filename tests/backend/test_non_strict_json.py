"""Non-strict JSON sent to every POST/PATCH/PUT operation the OpenAPI document lists: NaN, Infinity, -Infinity,
1e309, -1e309, 1,000-deep nesting, a 10 MB string, a wrong content type; as the whole body and as each property
of the operation's body. Every answer is a 2xx or a 4xx (never a 5xx), small, and a refused request commits
nothing; after it all the server answers and what was stored before reads back the same.

Then the body guard's edges one by one (backend/api/json_body.py) and the limits the OpenAPI document states.
The API is in-process (TestClient) on a real SQLite file."""
from __future__ import annotations

import json
import math
import re
import shutil
import sqlite3

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from backend.api.json_body import MAX_DEPTH, BodyError, parse, policy_of
from backend.app import create_app
from backend.settings import Settings
from tests.backend.stored import stored

API = "/api/v1"
INT64 = (-(2**63), 2**63 - 1)
NON_FINITE = [b"NaN", b"Infinity", b"-Infinity", b"1e309", b"-1e309"]
DEEP_ARRAYS = b"[" * 1000 + b"]" * 1000
DEEP_OBJECTS = b'{"a":' * 1000 + b"1" + b"}" * 1000
TEN_MB_STRING = b'"' + b"x" * (10 * 1024 * 1024) + b'"'
WRONG_TYPES = [(b'{"name": "x"}', "text/plain"), (b"name=x", "application/x-www-form-urlencoded"),
               (b'{"name": "x"}', None)]  # None: no Content-Type at all


@pytest.fixture(scope="module")
def api(tmp_path_factory, migrated_db):
    data = tmp_path_factory.mktemp("non-strict") / "data"
    data.mkdir()
    shutil.copyfile(migrated_db, data / "rlstudio.db")
    app = create_app(Settings(data_dir=data, dispatch=False, frontend_dir=data / "no-ui"))
    with TestClient(app, raise_server_exceptions=False) as client:  # a 500 is an answer to count, not a raise
        yield client




class Commits:
    """Whether anything stored changed since the last look: SQLite's data_version (it moves whenever another
    connection commits) on a connection of its own, then the digest to tell a real change from an empty commit.
    The digest of every row is read only after a commit, not after every request."""

    def __init__(self, client, path):
        self.client, self.connection = client, sqlite3.connect(path)
        self.version, self.digest = self._version(), stored(client)

    def _version(self) -> int:
        return self.connection.execute("PRAGMA data_version").fetchone()[0]

    def changed(self) -> bool:
        version = self._version()
        if version == self.version:
            return False
        digest = stored(self.client)
        changed, self.version, self.digest = digest != self.digest, version, digest
        return changed


def seed(client) -> tuple[dict, dict]:
    """An experiment and a run with metrics (a NaN among them), samples, logs and a status, and a webhook (off: it
    sends nothing, which would write delivery rows), through the API."""
    experiment = client.post(f"{API}/experiments", json={"name": "kept", "description": "before the fuzz"}).json()
    run = client.post(f"{API}/runs", json={"experiment_id": experiment["id"], "name": "kept-run", "launch": False,
                                           "tags": ["kept"], "notes": "stored before"}).json()
    token = {"Authorization": f"Bearer {run['ingest_token']}"}
    base = f"{API}/runs/{run['id']}"
    for path, body in [
        ("metrics", {"points": [{"key": "loss", "step": s, "value": v} for s, v in enumerate([1.0, 0.5, "NaN"])],
                     "series": [{"key": "reward", "steps": [0, 1, 2], "values": [0.1, 0.2, 0.3]}]}),
        ("samples", {"samples": [{"step": 1, "sample_index": i, "prompt": "2+2=", "response": str(i), "score": 1.0,
                                  "tokens": ["4"], "old_log_probs": [-0.1]} for i in range(2)]}),
        ("logs", {"lines": [{"seq": i, "text": f"line {i}"} for i in range(3)]}),
        ("status", {"status": "running", "fields": {"step": 2, "total_steps": 10}}),
    ]:
        assert client.post(f"{base}/{path}", json=body, headers=token).status_code == 200, path
    hook = client.post(f"{base}/webhooks", json={"url": "http://127.0.0.1:9/hook", "enabled": False})
    assert hook.status_code == 201, hook.text
    run["webhook_id"] = hook.json()["id"]
    return experiment, run


def read_back(client, experiment: dict, run: dict) -> dict:
    base = f"{API}/runs/{run['id']}"
    kept = client.get(f"{API}/experiments/{experiment['id']}").json()
    kept.pop("run_count")  # an accepted fork (a new run) counts here; the experiment itself is what must stay
    return {"experiment": kept, "run": client.get(base).json(), "metrics": client.get(f"{base}/metrics").json(),
            "samples": client.get(f"{base}/samples").json(), "logs": client.get(f"{base}/logs").json()}


def write_operations(schema: dict):
    """(method, path, body property names or None when the operation takes no body) from the OpenAPI document."""
    components = schema["components"]["schemas"]
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method not in ("post", "patch", "put"):
                continue
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body is not None and "$ref" in body:
                body = components[body["$ref"].rsplit("/", 1)[1]]
            yield method.upper(), path, None if body is None else sorted(body.get("properties", {}))


def shapes(value: bytes) -> list[bytes]:
    return [value, b"[1, " + value + b"]", b'{"x": ' + value + b"}"]


def probes(properties: list[str] | None):
    """(what, body, content type, property the answer must name or None). Every non-finite value bare, and in
    an array and an object in turn (each shape with every value once across the five)."""
    for i, value in enumerate(NON_FINITE):
        yield f"body {value.decode()}", value, "application/json", None
        shaped = shapes(value)[1 + i % 2]
        yield f"body {shaped.decode()}", shaped, "application/json", "x" if i % 2 else None
    yield "body: 1,000 nested arrays", DEEP_ARRAYS, "application/json", None
    yield "body: 1,000 nested objects", DEEP_OBJECTS, "application/json", None
    yield "body: a 10 MB string", TEN_MB_STRING, "application/json", None
    for content, content_type in WRONG_TYPES:
        yield f"body as {content_type}", content, content_type, None
    for name in properties or ():
        key = json.dumps(name).encode()
        for i, value in enumerate(NON_FINITE):
            shaped = shapes(value)[i % 3]
            yield f"{name}: {shaped.decode()}", b"{" + key + b": " + shaped + b"}", "application/json", name
        for what, value in [("1,000 nested arrays", DEEP_ARRAYS), ("1,000 nested objects", DEEP_OBJECTS),
                            ("a 10 MB string", TEN_MB_STRING)]:
            yield f"{name}: {what}", b"{" + key + b": " + value + b"}", "application/json", name


def test_non_strict_json_on_every_write_route_is_a_4xx_or_accepted_never_a_5xx(api):
    client = api
    experiment, run = seed(client)
    before = read_back(client, experiment, run)
    ids = {"run_id": run["id"], "experiment_id": experiment["id"], "webhook_id": run["webhook_id"]}
    routes = {(method, route.path): route for route in client.app.routes if isinstance(route, APIRoute)
              for method in route.methods}
    operations = list(write_operations(client.get("/openapi.json").json()))
    assert len(operations) >= 12, operations  # experiments, runs (create, edit, cancel, fork, resume, status), ...
    failures, sent = [], 0
    commits = Commits(client, client.app.state.settings.data_dir / "rlstudio.db")
    for method, path, properties in operations:
        url = re.sub(r"\{(\w+)\}", lambda m: str(ids[m.group(1)]), path)  # a new path parameter: add it to ids
        lenient = policy_of(routes[(method, path)]).lenient  # NaN / Infinity read as null (json_body's doc)
        # an upload route (multipart/form-data: the imports) refuses any JSON body as a whole, naming `body`
        uploads = getattr(routes[(method, path)].endpoint, "streams_body", False)
        for what, body, content_type, named in probes(properties):
            named = None if uploads else named
            headers = {"Authorization": f"Bearer {run['ingest_token']}"} if "/runs/{run_id}/" in path else {}
            if content_type:
                headers["Content-Type"] = content_type
            response = client.request(method, url, content=body, headers=headers)
            sent += 1
            where = f"{method} {path} with {what}: {response.status_code} {response.text[:300]}"
            status = response.status_code
            refusable_only = not lenient or not any(v.decode() in what for v in NON_FINITE) or "nested" in what
            changed = commits.changed()
            if not (200 <= status < 300 or 400 <= status < 500):
                failures.append(f"{where} (not a 2xx or a 4xx)")
                continue
            if len(response.content) > 20_000:
                failures.append(f"{method} {path} with {what}: an answer of {len(response.content)} bytes")
            if status < 300:
                if refusable_only:
                    failures.append(f"{where} (accepted)")
                continue
            if changed:
                failures.append(f"{where} (refused, but the database changed)")
            detail = response.json()["detail"]
            if status == 413:
                if not (isinstance(detail, str) and detail.startswith("body:")):
                    failures.append(f"{where} (a 413 that does not name the body)")
                continue
            locs = [error["loc"] for error in detail] if isinstance(detail, list) else []
            if not locs or not all(loc and loc[0] in ("body", "path", "query") for loc in locs):
                failures.append(f"{where} (a 4xx that names no field)")
            elif named and refusable_only and not any(loc[:2] == ["body", named] for loc in locs):
                failures.append(f"{where} (does not name {named})")
    assert not failures, f"{len(failures)} of {sent} requests:\n" + "\n".join(failures[:40])
    # the server is healthy and what was stored before reads back the same
    assert client.get("/healthz").status_code == 200
    assert client.get(f"{API}/health").status_code == 200
    assert client.get(f"{API}/runs").status_code == 200
    assert read_back(client, experiment, run) == before


# --------------------------------------------------------------------------------------- the guard's edges
def test_ingest_keeps_reading_non_finite_literals_as_documented(api):
    """A NaN loss stays a NaN: Python's json writes bare NaN / Infinity, which ingest reads as null (= NaN for a
    metric value); a number past the float range is infinite."""
    client = api
    run = client.post(f"{API}/runs", json={"name": "literals", "launch": False}).json()
    body = b'{"points": [' + b", ".join(b'{"key": "k", "step": %d, "value": %s}' % (i, v) for i, v in enumerate(
        [b"NaN", b"Infinity", b"1e309", b"-1e309", b"0.5"])) + b"]}"
    response = client.post(f"{API}/runs/{run['id']}/metrics", content=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {run['ingest_token']}"})
    assert response.json() == {"accepted": 5}
    series = client.get(f"{API}/runs/{run['id']}/metrics", params={"key": "k"}).json()["data"][0]
    assert series["values"] == ["NaN", "NaN", "Infinity", "-Infinity", 0.5]
    # elsewhere a non-finite number is refused, naming where
    refused = client.patch(f"{API}/runs/{run['id']}", content=b'{"tags": ["a", NaN]}',
                           headers={"Content-Type": "application/json"})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "tags", 1]


@pytest.mark.parametrize("lenient", [False, True])
def test_nesting_up_to_the_limit_is_read_and_past_it_named(lenient):
    deepest = json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert parse(json.dumps({"a": deepest[0]}).encode(), lenient=lenient) == {"a": deepest[0]}
    for tail in ("1", "NaN"):  # orjson's path, and the standard library's (orjson refuses NaN)
        body = '{"a": [0, {"b": ' + "[" * MAX_DEPTH + tail + "]" * MAX_DEPTH + "}]}"
        with pytest.raises(BodyError) as refused:
            parse(body.encode(), lenient=lenient)
        assert refused.value.loc[:4] == ["body", "a", 1, "b"] and refused.value.kind == "json_too_deep"
        assert len(refused.value.loc) == MAX_DEPTH + 1


@pytest.mark.parametrize(("body", "loc", "kind"), [
    (b'{"a": [1, "\\ud800"]}', ["body", "a", 1], "unicode_invalid"),  # a lone surrogate: SQLite refuses it
    (b'{"a": {"b": -Infinity}}', ["body", "a", "b"], "finite_number"),
    (b'{"a": 1e400}', ["body", "a"], "finite_number"),
    (b'{"a": ' + b"9" * 5000 + b"}", ["body", "a"], "finite_number"),  # past Python's 4,300-digit int() limit
    (b'{"a": [1,', ["body"], "json_invalid"),
    (b'\xff{"a": 1}', ["body"], "json_invalid"),
    (b'\xef\xbb\xbf{"a": 1}', ["body"], "json_invalid"),  # a byte order mark
])
def test_what_is_not_json_is_named(body, loc, kind):
    with pytest.raises(BodyError) as refused:
        parse(body, lenient=False)
    assert (refused.value.loc, refused.value.kind) == (loc, kind)
    assert math.isinf(parse(b'{"a": 1e400}', lenient=True)["a"])  # ingest's reading: infinite
    assert parse(b'"\\ud83d\\ude00"', lenient=False) == "\U0001f600"  # an escaped pair is one character


def test_body_limits_hold_without_a_content_length(api):
    client = api
    run = client.post(f"{API}/runs", json={"name": "limits", "launch": False}).json()
    limit = client.app.state.settings.max_json_bytes
    chunks = iter([b'{"notes": "', b"x" * limit, b'"}'])  # a generator: sent chunked, no Content-Length
    response = client.patch(f"{API}/runs/{run['id']}", content=chunks, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and response.json()["detail"].startswith("body:")
    # a body where the route takes none is still checked: a stray one does not let the cancel through
    stray = client.post(f"{API}/runs/{run['id']}/cancel", content=b"NaN", headers={"Content-Type": "application/json"})
    assert stray.status_code == 422 and client.get(f"{API}/runs/{run['id']}").json()["status"] != "cancelled"


def test_a_422_is_bounded_and_safe_to_encode(api):
    client = api
    run = client.post(f"{API}/runs", json={"name": "many", "launch": False}).json()
    points = [{"key": "k" * 1000, "step": "x" * 5000, "value": [1]} for _ in range(2000)]
    response = client.post(f"{API}/runs/{run['id']}/metrics", json={"points": points},
                           headers={"Authorization": f"Bearer {run['ingest_token']}"})
    detail = response.json()["detail"]
    assert response.status_code == 422 and len(response.content) < 20_000
    assert detail[-1]["type"] == "too_many_errors" and len(detail) == 51
    echoed = [e["input"] for e in detail if "input" in e]
    assert echoed and all(len(e) <= 101 for e in echoed if isinstance(e, str))  # 100 characters and '…'
    assert all(not isinstance(e, (list, dict)) for e in echoed)  # containers are not echoed
    # the wrong shape (#24: it answered 200 {"accepted": 0}) names what is wrong
    for body, loc in [({"step": -1, "data": {"x": 1}}, ["body", "step"]), ({}, ["body"])]:
        wrong = client.post(f"{API}/runs/{run['id']}/metrics", json=body,
                            headers={"Authorization": f"Bearer {run['ingest_token']}"})
        assert wrong.status_code == 422 and wrong.json()["detail"][0]["loc"] == loc, wrong.text


def test_numbers_past_64_bits_name_the_field(api):
    client = api
    run = client.post(f"{API}/runs", json={"name": "big", "launch": False}).json()
    response = client.post(f"{API}/runs/{run['id']}/samples", json={"samples": [
        {"step": 1, "sample_index": 0}, {"step": 2**63, "sample_index": 1}]},
        headers={"Authorization": f"Bearer {run['ingest_token']}"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "samples", 1, "step"]
    assert client.get(f"{API}/runs/{run['id']}/samples").json()["count"] == 0


# ------------------------------------------------------------------------------------- the OpenAPI document
def test_the_openapi_document_states_the_limits_the_api_enforces(api):
    schema = api.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    unbounded = []

    def integers(node, where: str, seen: set) -> None:
        if isinstance(node, dict):
            kinds = node.get("type")
            if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
                low, high = node.get("minimum", node.get("exclusiveMinimum")), node.get(
                    "maximum", node.get("exclusiveMaximum"))
                if low is None or high is None or low < INT64[0] or high > INT64[1]:
                    unbounded.append(where)
            ref = node.get("$ref", "")
            if ref and ref not in seen:
                seen.add(ref)
                integers(components[ref.rsplit("/", 1)[1]], f"{where} -> {ref.rsplit('/', 1)[1]}", seen)
            for key, child in node.items():
                integers(child, f"{where}.{key}", seen)
        elif isinstance(node, list):
            for child in node:
                integers(child, where, seen)

    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            where = f"{method.upper()} {path}"
            for parameter in operation.get("parameters", []):
                integers(parameter["schema"], f"{where} {parameter['name']}", set())
            integers(operation.get("requestBody", {}), f"{where} body", set())
            if method in ("post", "patch", "put") and "requestBody" in operation:
                assert {"413", "422"} <= set(operation["responses"]), where
    assert not unbounded, unbounded  # every integer the API reads: 64 bits at most
    assert schema["paths"]["/api/v1/runs/{run_id}"]["get"]["parameters"][0]["schema"]["maximum"] == INT64[1]
    ingest = components["MetricsIngest"]
    assert ingest["additionalProperties"] is False and ingest["minProperties"] == 1  # points and/or series
    query = {p["name"]: p for p in schema["paths"]["/api/v1/metrics"]["get"]["parameters"]}
    assert all("at least one `key` or `key_pattern`" in query[name]["description"] for name in ("key", "key_pattern"))
