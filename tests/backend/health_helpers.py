"""What the run-health tests share: metrics and samples sent through the API as the dashboard logger sends them,
the health report read back, an alarm found in it, a planted series replayed step by step."""
from __future__ import annotations

import math

from tests.backend.conftest import auth

API = "/api/v1"
NAN = float("nan")


def send(client, run, step: int, values: dict[str, float], wall_time: float | None = None) -> None:
    """One step's metrics, columnar, as the dashboard logger sends them."""
    series = []
    for key, value in values.items():
        entry = {"key": key, "steps": [step], "values": ["NaN" if isinstance(value, float) and math.isnan(value)
                                                        else value]}
        if wall_time is not None:
            entry["wall_times"] = [wall_time]
        series.append(entry)
    r = client.post(f"{API}/runs/{run['id']}/metrics", json={"series": series}, headers=auth(run))
    assert r.status_code == 200, r.text


def health(client, run) -> dict:
    r = client.get(f"{API}/runs/{run['id']}/health")
    assert r.status_code == 200, r.text
    return r.json()


def alarm(body: dict, alarm_id: str) -> dict | None:
    return next((a for a in body["alarms"] if a["id"] == alarm_id), None)


def replay(client, run, steps: dict[int, dict[str, float]], alarm_id: str, restart=None) -> dict:
    """Send the steps in order, reading the health after each: the step at which the alarm was first seen firing
    and first seen cleared, and its last state. `restart`: called once the alarm fired, returns the client of a
    new server on the same database (the rest of the run goes there)."""
    seen = {"fired_at": None, "cleared_at": None}
    for step in sorted(steps):
        if restart is not None and seen["fired_at"] is not None:
            client, restart = restart(), None
            assert alarm(health(client, run), alarm_id)["state"] == "firing"  # the stored state, read back
        send(client, run, step, steps[step])
        found = alarm(health(client, run), alarm_id)
        if found and found["state"] == "firing" and seen["fired_at"] is None:
            seen["fired_at"] = step
        if found and found["state"] == "cleared" and seen["cleared_at"] is None:
            seen["cleared_at"] = step
        seen["last"] = found
    return seen


def series(**columns: list[float]) -> dict[int, dict[str, float]]:
    """Columns of values from step 1 -> {step: {key: value}} (a key spelled with __ for /)."""
    out: dict[int, dict[str, float]] = {}
    for name, values in columns.items():
        for i, v in enumerate(values):
            out.setdefault(i + 1, {})[name.replace("__", "/")] = v
    return out


def answers(step: int, rows: list[tuple]) -> list[dict]:
    """(response, score[, prompt_index]) -> training samples of one step."""
    out = []
    for i, row in enumerate(rows):
        response, score = row[0], row[1]
        sample = {"step": step, "sample_index": i, "response": response, "score": score, "prompt": "Q: 1+1?"}
        if len(row) > 2:
            sample.update(prompt_index=row[2], group_uid=f"g{step}-{row[2]}")
        out.append(sample)
    return out


def post_samples(client, run, samples: list[dict]) -> None:
    r = client.post(f"{API}/runs/{run['id']}/samples", json={"samples": samples}, headers=auth(run))
    assert r.status_code == 200, r.text
