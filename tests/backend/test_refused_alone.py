"""A refused upload is refused alone (issue 35): a sample or metric batch with a number the database cannot hold
(step 2^63) gets a 422 naming the field, stores nothing, and every valid upload after it is taken. The server
judges a run's health from each batch and keeps the judge's state between batches: a batch refused after it was
judged used to leave that state poisoned (every later train-split sample upload of the run got a 422 naming no
field). Real SQLite file / PostgreSQL, through the API."""
from __future__ import annotations

import pytest

from tests.backend.conftest import DATABASES, external_run
from tests.backend.stored import stored

API = "/api/v1"
HUGE = 2**63  # one past the database's integers


def sample(step: int, index: int, **extra) -> dict:
    return {"step": step, "sample_index": index, "split": "train", "prompt": "1+1=", "response": "2",
            "score": 1.0, "prompt_index": index // 2, "group_uid": f"g{index // 2}", **extra}


def names(response, *loc) -> bool:
    return any(error["loc"][-len(loc):] == list(loc) for error in response.json()["detail"])


@pytest.mark.parametrize("database", DATABASES, indirect=True)
@pytest.mark.parametrize("bad", [{"step": HUGE}, {"step": 2**62 + 1}, {"sample_index": HUGE},
                                 {"prompt_index": -HUGE - 1}, {"policy_version_max": HUGE}])
def test_a_refused_sample_does_not_block_the_valid_ones(client, bad):
    run = external_run(client)
    token = {"Authorization": f"Bearer {run['ingest_token']}"}
    url = f"{API}/runs/{run['id']}/samples"
    assert client.post(url, headers=token, json={"samples": [sample(1, 0), sample(1, 1)]}).status_code == 200
    field = next(iter(bad))
    before = stored(client)
    for batch in ([{**sample(2, 0), **bad}], [sample(2, 0), {**sample(2, 1), **bad}]):  # alone, and after a good row
        refused = client.post(url, headers=token, json={"samples": batch})
        assert refused.status_code == 422, refused.text
        assert names(refused, len(batch) - 1, field), refused.text
        assert stored(client) == before, "a refused batch stored something"
    for step in (2, 3, 4):  # what a logger sends next: every one taken
        ok = client.post(url, headers=token, json={"samples": [sample(step, 0), sample(step, 1)]})
        assert ok.status_code == 200, f"step {step}: {ok.text}"
    steps = client.get(f"{url}/steps").json()["data"]
    assert [(s["step"], s["split"], s["count"]) for s in steps] == [(s, "train", 2) for s in (1, 2, 3, 4)]
    health = client.get(f"{API}/runs/{run['id']}/health").json()
    assert health["checked_step"] in (None, 3, 4), health  # the judge went on from the stored rows, not from 2^63


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_a_refused_metric_batch_does_not_block_the_valid_ones(client):
    run = external_run(client)
    token = {"Authorization": f"Bearer {run['ingest_token']}"}
    url = f"{API}/runs/{run['id']}/metrics"
    point = {"key": "critic/score/mean", "value": 0.5}
    assert client.post(url, headers=token, json={"points": [{**point, "step": 1}]}).status_code == 200
    before = stored(client)
    for body in ({"points": [{**point, "step": HUGE}]},
                 {"series": [{"key": "actor/entropy", "steps": [2, HUGE], "values": [1.0, 1.0]}]}):
        refused = client.post(url, headers=token, json=body)
        assert refused.status_code == 422, refused.text
        assert "step" in str(refused.json()["detail"][0]["loc"]), refused.text
        assert stored(client) == before
    for step in (2, 3):
        ok = client.post(url, headers=token, json={"points": [{**point, "step": step}]})
        assert ok.status_code == 200, ok.text
    series = client.get(f"{API}/metrics", params={"run_id": run["id"], "key": "critic/score/mean"}).json()
    assert series["data"][0]["steps"] == [1, 2, 3]
