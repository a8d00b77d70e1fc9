"""GET /runs/{id}/tools on a real SQLite file: the tools a run's tool config declares and the ones its logged
answers called (the engine's own trajectories, tests/trajectory_samples.py), with how many answers called each."""
from __future__ import annotations

import yaml

from tests.backend.conftest import external_run
from tests.backend.test_sample_turns import logger_body
from tests.trajectory_samples import multi_turn_samples

MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"


def tools_of(client, run) -> dict:
    r = client.get(f"/api/v1/runs/{run['id']}/tools")
    assert r.status_code == 200, r.text
    return r.json()


def post(client, run, samples):
    r = client.post(f"/api/v1/runs/{run['id']}/samples", json={"samples": samples},
                    headers={"Authorization": f"Bearer {run['ingest_token']}"})
    assert r.status_code == 200, r.text


def test_declared_and_called_tools(client, tmp_path):
    config = tmp_path / "tools.yaml"
    config.write_text(yaml.safe_dump({"tools": [
        {"class_name": "engine.tools.calculator.CalculatorTool", "tool_schema": {"function": {"name": "calculator"}}},
        {"class_name": "engine.tools.sandbox.PythonSandboxTool", "tool_schema": {"function": {"name": "python"}}}]}))
    run = external_run(client, overrides=[f"{MULTI_TURN}.enable=True", f"{MULTI_TURN}.format=compact",
                                          f"{MULTI_TURN}.tool_config_path={config}"])
    before = tools_of(client, run)  # declared, never called yet
    assert before["data"] == [{"name": "calculator", "declared": True, "samples": 0},
                               {"name": "python", "declared": True, "samples": 0}]
    assert before["tool_config_path"] == str(config) and before["config_note"] is None

    # the engine's trajectories: a call, a failed call (both the calculator), an answer without a call; twice
    post(client, run, logger_body(multi_turn_samples(step=1)) + logger_body(multi_turn_samples(step=2, split="val")))
    # an answer calling a tool the config does not declare (as a run whose config changed may log)
    other = logger_body(multi_turn_samples(step=3))[0]
    other["turns"][1]["tool"] = "search"
    post(client, run, [other])
    after = tools_of(client, run)
    assert after["count"] == 3 and after["data"] == [
        {"name": "calculator", "declared": True, "samples": 4},
        {"name": "python", "declared": True, "samples": 0},
        {"name": "search", "declared": False, "samples": 1}]
    # the Samples page's tool filter agrees with the counts
    listed = client.get(f"/api/v1/runs/{run['id']}/samples", params={"tool": "calculator"}).json()
    assert listed["count"] == 4


def test_builtin_missing_and_absent_tool_configs(client):
    builtin = external_run(client, overrides=[f"{MULTI_TURN}.enable=True",
                                              f"{MULTI_TURN}.tool_config_path=builtin:tools/calculator.yaml"])
    assert tools_of(client, builtin)["data"] == [{"name": "calculator", "declared": True, "samples": 0}]

    elsewhere = external_run(client, overrides=[f"{MULTI_TURN}.enable=True",
                                                f"{MULTI_TURN}.tool_config_path=/nowhere/tools.yaml"])
    post(client, elsewhere, logger_body(multi_turn_samples()))
    out = tools_of(client, elsewhere)  # a run dispatched to another machine: its config file is not here
    assert out["data"] == [{"name": "calculator", "declared": False, "samples": 2}]
    assert "/nowhere/tools.yaml" in out["config_note"] and "no such YAML file" in out["config_note"]

    single = external_run(client)
    assert tools_of(client, single) == {"data": [], "count": 0, "tool_config_path": None, "config_note": None}
    assert client.get("/api/v1/runs/999999/tools").status_code == 404
