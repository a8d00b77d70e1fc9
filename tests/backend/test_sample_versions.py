"""Asynchronous training's per-answer policy versions and staleness (issue 29): made by the engine's sample builder
from a real batch, sent as the dashboard logger sends them, stored on a real SQLite file (and PostgreSQL), served
and filtered."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine.loggers.dashboard import DashboardLogger
from engine.models.tokenizer import build_char_tokenizer
from engine.protocol import Batch
from engine.trainer.samples import build_samples
from tests.backend.conftest import DATABASES, auth, external_run


def _engine_samples(step: int) -> list[dict]:
    """Three answers trained at `step`: on-policy, one version behind, and one that crossed an update (its
    first tokens one version older than its last), as the logger's request body has them."""
    tok = build_char_tokenizer()
    responses = torch.tensor([tok.encode(t, add_special_tokens=False) for t in ("ab", "cd", "ef")])
    current = step - 1
    batch = Batch({"responses": responses, "response_mask": torch.ones_like(responses),
                   "token_level_scores": torch.zeros(responses.shape),
                   "policy_versions": torch.tensor([[current] * 2, [current - 1] * 2, [current - 2, current - 1]])},
                  {"prompt_index": [0, 1, 2]})
    samples = build_samples(batch, tok, step, "train", ["ab", "cd", "ef"])
    logger = SimpleNamespace(_sample_counters={})
    return [DashboardLogger._sample(logger, step, s) for s in samples]


@pytest.mark.parametrize("database", DATABASES, indirect=True)  # the rows: SQLite reduces in SQL, others in Python
def test_versions_are_stored_served_and_filtered_by_staleness(client):
    run = external_run(client)
    body = _engine_samples(5)
    assert "policy_versions" not in body[0]["extras"] and body[2]["policy_versions"] == [2, 3]
    plain = {"step": 5, "sample_index": 3, "response": "no versions", "prompt_index": 3}  # a sync run's older logger
    assert client.post(f"/api/v1/runs/{run['id']}/samples", json={"samples": body + [plain]},
                       headers=auth(run)).status_code == 200
    base = f"/api/v1/runs/{run['id']}/samples"
    listed = client.get(base).json()["data"]
    got = [(s["policy_versions"], s["policy_version_min"], s["policy_version_max"], s["staleness"],
            s["staleness_worst"]) for s in listed]
    assert got == [([4, 4], 4, 4, 0, 0), ([3, 3], 3, 3, 1, 1), ([2, 3], 2, 3, 1, 2), (None, None, None, None, None)]
    assert client.get(f"{base}/{listed[2]['id']}").json()["policy_versions"] == [2, 3]

    def indices(path, **params):
        return [s["prompt_index"] for s in client.get(path, params=params).json()["data"]]

    assert indices(base, stale="true") == [1, 2]
    assert indices(base, stale="false") == [0, 3]  # on-policy, and the answer without versions
    assert indices(base, min_staleness=1) == [1, 2] and indices(base, min_staleness=2) == []
    rows = client.get(f"{base}/rows", params={"stale": "true"}).json()
    assert rows["count"] == 2
    assert [(r["policy_version_min"], r["policy_version_max"], r["staleness"]) for r in rows["data"]] == [(3, 3, 1),
                                                                                                       (2, 3, 1)]
    exported = client.get(f"{base}/export", params={"stale": "true"}).text.splitlines()
    assert len(exported) == 2 and '"policy_versions": [2, 3]' in exported[1]


def test_bad_version_filters_and_values_name_the_field(client):
    run = external_run(client)
    base = f"/api/v1/runs/{run['id']}/samples"
    for params, field in (({"min_staleness": -1}, "min_staleness"), ({"min_staleness": "old"}, "min_staleness"),
                          ({"stale": "maybe"}, "stale"), ({"stale": "false", "min_staleness": 2}, "min_staleness")):
        for path in (base, f"{base}/rows", f"{base}/export"):
            answer = client.get(path, params=params)
            assert answer.status_code == 422, (path, params)
            assert answer.json()["detail"][0]["loc"] == ["query", field], (path, params)

    def post(sample):
        return client.post(base, json={"samples": [{"step": 3, "sample_index": 0, **sample}]}, headers=auth(run))

    short = post({"tokens": ["a", "b"], "policy_versions": [1]})
    assert short.status_code == 422 and "policy_versions: 1 values for 2 tokens" in short.text
    assert post({"policy_versions": [1, "2"]}).status_code == 422  # versions are integers
    upside = post({"policy_version_min": 3, "policy_version_max": 2})
    assert upside.status_code == 422 and "policy_version_min (3) is above policy_version_max (2)" in upside.text
    # the summary alone (no per-token array) is enough; the staleness follows from the step
    assert post({"policy_version_min": 0, "policy_version_max": 1}).status_code == 200
    stored = client.get(base).json()["data"][0]
    assert (stored["staleness"], stored["staleness_worst"], stored["policy_versions"]) == (1, 2, None)
