"""A resume point past what event ids can be is bad input (issue 35): `Last-Event-ID: 9223372036854775808` (or
`?last_event_id=`) on either SSE stream is a 422 naming it, before the stream starts, where it used to get 200 and
`hello` and then die on an OverflowError. The OpenAPI document states the bound; the largest allowed id streams.
A real server (uvicorn subprocess) on a real SQLite file."""
from __future__ import annotations

import httpx

from tests.backend.conftest import HTTP_TIMEOUT, SSEReader

HUGE = str(2**63)
MAX = "9" * 18


def opened(url: str, **kwargs) -> tuple[int, dict | None]:
    """The status of a stream request, and its 422's body; a stream that opens is closed at once."""
    with httpx.stream("GET", url, timeout=HTTP_TIMEOUT, **kwargs) as response:
        if response.status_code == 200:
            return 200, None
        response.read()
        return response.status_code, response.json()


def test_a_huge_resume_point_is_refused_naming_it(server_factory):
    server = server_factory().start()
    url = server.url
    run = httpx.post(f"{url}/api/v1/runs", json={"name": "sse", "launch": False}, timeout=HTTP_TIMEOUT).json()
    streams = [f"{url}/api/v1/runs/events", f"{url}/api/v1/runs/{run['id']}/events"]
    for stream in streams:
        for value in (HUGE, "1" + MAX, "-1", "1e3", "12 34"):
            status, body = opened(stream, headers={"Last-Event-ID": value})
            assert status == 422, (stream, value, status)
            assert body["detail"][0]["loc"] == ["header", "Last-Event-ID"], body
        for value in (HUGE, "1" + MAX, "-1"):
            status, body = opened(stream, params={"last_event_id": value})
            assert status == 422, (stream, value, status)
            assert body["detail"][0]["loc"] == ["query", "last_event_id"], body
        assert opened(stream, headers={"Last-Event-ID": MAX})[0] == 200  # the largest declared: it streams
        assert opened(stream, params={"last_event_id": MAX})[0] == 200
        assert opened(stream, headers={"Last-Event-ID": ""})[0] == 200  # empty: no resume point
    schema = httpx.get(f"{url}/openapi.json", timeout=HTTP_TIMEOUT).json()
    for path in ("/api/v1/runs/events", "/api/v1/runs/{run_id}/events"):
        params = {p["name"]: p["schema"] for p in schema["paths"][path]["get"]["parameters"]}
        assert params["Last-Event-ID"]["anyOf"][0]["pattern"] == r"^[0-9]{0,18}$"
        assert params["last_event_id"]["anyOf"][0]["maximum"] == int(MAX)
    # the streams still serve: a resume from 0 replays the run's events
    reader = SSEReader(f"{url}/api/v1/runs/{run['id']}/events", headers={"Last-Event-ID": "0"})
    try:
        assert reader.wait(lambda e: e.get("event") == "status" and e["data"]["id"] == run["id"])
    finally:
        reader.close()
    server.stop()
    log = server.log_path.read_text()
    assert "Traceback" not in log and "OverflowError" not in log, log[-3000:]
