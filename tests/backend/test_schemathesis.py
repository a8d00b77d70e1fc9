"""Property-based API tests: schemathesis generates requests from /openapi.json (valid and invalid ones) and
checks every response: no 5xx, a declared status code, a body that matches the declared schema, declared
content types and headers, 405 with the right Allow for undeclared methods. Every 4xx must leave the database
exactly as it was. Stateful sequences (create -> read -> update -> delete, along the links schemathesis infers
from the responses) run the same checks."""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import positive_data_acceptance
from sqlalchemy import inspect, text

from backend.app import create_app
from backend.settings import Settings

_data = Path(tempfile.mkdtemp(prefix="rlstudio-st-"))
app = create_app(Settings(data_dir=_data, dispatch=False, frontend_dir=_data / "no-ui"))
# SSE endpoints stream forever; they are tested on a real server in test_live.py.
schema = schemathesis.openapi.from_asgi("/openapi.json", app).exclude(path_regex=r"/events$")

# A schema-valid request may still be refused: a config key the engine's schema rejects, an id beyond 64 bits,
# a query that names no metric. Those are 422s naming the field (tests/backend/test_bad_inputs.py), so the
# "every schema-valid request is accepted" check does not apply.
EXCLUDED = [positive_data_acceptance]
QUICK = settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def stored() -> str:
    """A digest of every row of every table: equal digests = nothing stored changed."""
    digest = hashlib.sha256()
    with app.state.engine.connect() as conn:
        for table in sorted(inspect(conn).get_table_names()):
            for row in conn.execute(text(f'SELECT * FROM "{table}" ORDER BY 1')):
                digest.update(repr(tuple(row)).encode())
    return digest.hexdigest()


def refused_changes_nothing(before: str, response, case) -> None:
    if 400 <= response.status_code < 500:
        assert stored() == before, (f"{case.method} {case.formatted_path} -> {response.status_code} changed the "
                                    f"database: {response.text[:300]}")


@schema.parametrize()
@QUICK
def test_responses_match_the_schema(case):
    before = stored()
    response = case.call()
    case.validate_response(response, excluded_checks=EXCLUDED)
    refused_changes_nothing(before, response, case)


class Workflow(schema.as_state_machine()):
    """Chains of calls along the inferred links: POST /experiments -> GET/PATCH/DELETE /experiments/{id},
    POST /runs -> PATCH /runs/{id}, cancel, fork, ingest, DELETE, ..."""

    def before_call(self, case):
        self._before = stored()

    def validate_response(self, response, case, additional_checks=None, **kwargs):
        case.validate_response(response, excluded_checks=EXCLUDED, transport_kwargs=kwargs)
        refused_changes_nothing(self._before, response, case)


TestStatefulSequences = Workflow.TestCase
TestStatefulSequences.settings = settings(QUICK, max_examples=10, stateful_step_count=6)


def call(method: str, path: str, *, expect: int, path_parameters=None, body=None, query=None, headers=None):
    """One request built from the schema's operation, every check run on its response."""
    case = schema[path][method].Case(path_parameters=path_parameters or {}, body=body if body is not None else
                                     schemathesis.core.NOT_SET, query=query, headers=headers)
    before = stored()
    response = case.call()
    assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text[:300]}"
    case.validate_response(response, excluded_checks=EXCLUDED)
    refused_changes_nothing(before, response, case)
    return response.json() if response.content else None


def test_run_create_update_ingest_cancel_delete():
    """The runs' own sequence (a run must be cancelled before it can be deleted), which the inferred links
    reach only by luck."""
    experiment = call("POST", "/api/v1/experiments", expect=201, body={"name": "st-sequence"})
    eid = {"experiment_id": experiment["id"]}
    run = call("POST", "/api/v1/runs", expect=201, body={
        "experiment_id": experiment["id"], "name": "seq", "launch": False, "tags": ["a"],
        "overrides": ["trainer.total_training_steps=3"]})
    rid, token = {"run_id": run["id"]}, {"Authorization": f"Bearer {run['ingest_token']}"}
    assert call("PATCH", "/api/v1/runs/{run_id}", expect=200, path_parameters=rid,
                body={"name": "renamed", "tags": ["b"]})["tags"] == ["b"]
    call("POST", "/api/v1/runs/{run_id}/metrics", expect=200, path_parameters=rid, headers=token,
         body={"points": [{"key": "critic/score/mean", "step": 1, "value": 0.5}]})
    call("POST", "/api/v1/runs/{run_id}/samples", expect=200, path_parameters=rid, headers=token,
         body={"samples": [{"step": 1, "sample_index": 0, "prompt": "1+1=", "response": "2", "score": 1.0}]})
    call("POST", "/api/v1/runs/{run_id}/logs", expect=200, path_parameters=rid, headers=token,
         body={"lines": [{"seq": 0, "text": "step 1"}]})
    call("POST", "/api/v1/runs/{run_id}/status", expect=200, path_parameters=rid, headers=token,
         body={"status": "running", "fields": {"step": 1, "total_steps": 3}})
    assert call("GET", "/api/v1/runs/{run_id}", expect=200, path_parameters=rid)["progress_step"] == 1
    assert call("GET", "/api/v1/runs/{run_id}/samples", expect=200, path_parameters=rid)["count"] == 1
    call("DELETE", "/api/v1/runs/{run_id}", expect=409, path_parameters=rid)  # still running: refused, no change
    call("DELETE", "/api/v1/experiments/{experiment_id}", expect=409, path_parameters=eid)
    assert call("POST", "/api/v1/runs/{run_id}/cancel", expect=200, path_parameters=rid)["status"] == "cancelled"
    call("POST", "/api/v1/runs/{run_id}/cancel", expect=409, path_parameters=rid)
    call("DELETE", "/api/v1/runs/{run_id}", expect=204, path_parameters=rid)
    call("GET", "/api/v1/runs/{run_id}", expect=404, path_parameters=rid)
    call("PATCH", "/api/v1/experiments/{experiment_id}", expect=200, path_parameters=eid, body={"name": "st-done"})
    call("DELETE", "/api/v1/experiments/{experiment_id}", expect=204, path_parameters=eid)
    call("GET", "/api/v1/experiments/{experiment_id}", expect=404, path_parameters=eid)
