"""Property-based API test: schemathesis generates requests from /openapi.json; none may get a 5xx."""
from __future__ import annotations

import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings

from backend.app import create_app
from backend.settings import Settings

_data = Path(tempfile.mkdtemp(prefix="rlstudio-st-"))
app = create_app(Settings(data_dir=_data, dispatch=False, frontend_dir=_data / "no-ui"))
# SSE endpoints stream forever; they are tested on a real server in test_live.py.
schema = schemathesis.openapi.from_asgi("/openapi.json", app).exclude(path_regex=r"/events$")


@schema.parametrize()
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
def test_no_server_errors(case):
    response = case.call()
    assert response.status_code < 500, f"{case.method} {case.formatted_path} -> {response.status_code}: " \
                                       f"{response.text[:500]}"
