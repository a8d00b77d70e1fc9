"""Property-based API tests: schemathesis generates requests from /openapi.json (valid and invalid ones) and
checks every response: no 5xx, a declared status code, a body that matches the declared schema, declared
content types and headers, 405 with the right Allow for undeclared methods. Every 4xx must leave the database
exactly as it was. Stateful sequences (create -> read -> update -> delete, along the links schemathesis infers
from the responses) run the same checks."""
from __future__ import annotations

import hashlib
import re
import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import positive_data_acceptance
from sqlalchemy import inspect, text

from backend.api.routes import metrics as metrics_routes
from backend.app import create_app
from backend.settings import Settings

_data = Path(tempfile.mkdtemp(prefix="rlstudio-st-"))
# webhooks=False: a generated webhook's URL (any host) is never sent to
app = create_app(Settings(data_dir=_data, dispatch=False, frontend_dir=_data / "no-ui", webhooks=False))
# SSE endpoints stream forever; they are tested on a real server in test_live.py.
schema = schemathesis.openapi.from_asgi("/openapi.json", app).exclude(path_regex=r"/events$")

# Every schema-valid request is accepted ("positive data acceptance": 2xx, or 404/409 for ids and states), except
# where it breaks a rule the document states in words because OpenAPI cannot say it as a schema (a rule between two
# fields, or the engine's config schema, which GET /config/schema serves): such a request must be a 422 naming the
# field the rule is about. Each rule here is in the document's descriptions.
ENGINE_CONFIG = {("POST", "/api/v1/runs"), ("POST", "/api/v1/runs/{run_id}/fork"), ("POST", "/api/v1/config/validate")}
NESTED_QUANTIFIER = metrics_routes._NESTED_QUANTIFIER  # what the server refuses, as its description says


def _values(query: dict, name: str) -> list:
    value = (query or {}).get(name)
    return [] if value is None else value if isinstance(value, list) else [value]


def positive(case) -> bool:
    meta = case.meta
    return meta is not None and meta.generation.mode.is_positive


def _sample_rules(sample: dict) -> bool:
    """Whether an answer breaks a rule between its fields (SampleIn's description)."""
    tokens, versions = sample.get("tokens"), sample.get("policy_versions") or []
    if isinstance(tokens, list) and versions and len(versions) != len(tokens):
        return True
    mask = sample.get("loss_mask")
    if isinstance(tokens, list) and isinstance(mask, list) and len(mask) != len(tokens):
        return True
    extras = sample.get("extras")
    if isinstance(extras, dict) and ("turns" in extras or "loss_mask" in extras):
        return True  # an older logger's turns: read as `turns` / `loss_mask`, by their rules
    low = sample.get("policy_version_min", min(versions, default=None))
    high = sample.get("policy_version_max", max(versions, default=None))
    low = min(versions) if low is None and versions else low
    high = max(versions) if high is None and versions else high
    if low is not None and high is not None and low > high:
        return True
    for turn in sample.get("turns") or []:
        start, end = turn.get("start"), turn.get("end")
        if start is not None and end is not None and (end < start or (isinstance(tokens, list) and end > len(tokens))):
            return True
    return False


def stated_rule(case) -> set[str]:
    """The fields a schema-valid request's refusal may name, when it breaks rules stated in words; else empty."""
    if not positive(case):
        return set()
    method, path, query = case.method.upper(), case.path, case.query or {}
    body = case.body if isinstance(case.body, dict) else {}
    broken: set[str] = set()
    if (method, path) == ("POST", "/api/v1/runs") and body.get("experiment_id") is not None:
        broken.add("experiment_id")  # a reference to an experiment that may not exist (stated on the field)
    if (method, path) in ENGINE_CONFIG and (body.get("config") or body.get("overrides")):
        broken.add("config")  # a key or value the engine's schema refuses: a config_error naming it
    low, high = _values(query, "min_turns"), _values(query, "max_turns")
    if low and high and int(low[0]) > int(high[0]):
        broken.add("max_turns")
    if _values(query, "stale") in ([False], ["false"]) and any(int(v) > 0 for v in _values(query, "min_staleness")):
        broken.add("min_staleness")
    if path == "/api/v1/metrics":
        patterns = _values(query, "key_pattern")
        if not _values(query, "key") and not patterns:
            broken.add("key")
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error:
                broken.add("key_pattern")
            if NESTED_QUANTIFIER.search(pattern):
                broken.add("key_pattern")
    if path.endswith("/metrics"):
        for series in body.get("series") or []:
            lengths = {len(series.get("steps") or []), len(series.get("values") or [])}
            if series.get("wall_times") is not None:
                lengths.add(len(series["wall_times"]))
            if len(lengths) > 1:
                broken.add("series")
    if path.endswith("/samples") and any(_sample_rules(s) for s in body.get("samples") or []):
        broken.add("samples")
    return broken


def past_a_bound_by_rounding(case, response) -> bool:
    """A schema-valid-looking integer a few units past a bound near 2^62 or 2^63 (step, ids): JSON Schema tools
    compare numbers as floats, where it equals the bound; the API compares exactly and names the field. Such a
    request is not schema-valid."""
    if not positive(case) or response.status_code != 422:
        return False
    errors = response.json()["detail"]
    return all(e.get("type") in ("less_than_equal", "greater_than_equal") and isinstance(e.get("input"), int)
               and float(e["input"]) == float(next(iter(e.get("ctx", {}).values()), 0.5)) for e in errors)


def check(case, response, **kwargs) -> None:
    """Every check; a request that breaks a stated rule must instead be a 422 naming its field."""
    if past_a_bound_by_rounding(case, response):
        case.validate_response(response, excluded_checks=[positive_data_acceptance], **kwargs)
        return
    rule = stated_rule(case)
    if rule and response.status_code == 422:
        named = {str(part) for error in response.json()["detail"] for part in error.get("loc", [])}
        assert named & rule, f"{case.method} {case.formatted_path}: the 422 does not name {rule}: {response.text}"
        case.validate_response(response, excluded_checks=[positive_data_acceptance], **kwargs)
        return
    case.validate_response(response, **kwargs)


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
    check(case, response)
    refused_changes_nothing(before, response, case)


class Workflow(schema.as_state_machine()):
    """Chains of calls along the inferred links: POST /experiments -> GET/PATCH/DELETE /experiments/{id},
    POST /runs -> PATCH /runs/{id}, cancel, fork, ingest, DELETE, ..."""

    def before_call(self, case):
        self._before = stored()

    def validate_response(self, response, case, additional_checks=None, **kwargs):
        check(case, response, transport_kwargs=kwargs)
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
    check(case, response)
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
