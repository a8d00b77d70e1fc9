"""The config's one gate: a combination of keys the engine cannot run is refused when the run is created, with a 422
naming the key, before anything is stored or any job starts (the checks live in the engine's resolve, so the job's
workers never meet them)."""
from __future__ import annotations

import pytest

from tests.backend.stored import stored

API = "/api/v1"
MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"
TOOLS = f"{MULTI_TURN}.tool_config_path=builtin:tools/calculator.yaml"

# (name, overrides, the key the answer names)
CASES = [
    ("multi-turn with ignore_eos", [f"{MULTI_TURN}.enable=true", TOOLS, "actor_rollout_ref.rollout.ignore_eos=true"],
     "actor_rollout_ref.rollout.ignore_eos"),
    ("multi-turn without a tool config", [f"{MULTI_TURN}.enable=true"], f"{MULTI_TURN}.tool_config_path"),
    ("multi-turn with a tool config the server lacks", [f"{MULTI_TURN}.enable=true",
                                                         f"{MULTI_TURN}.tool_config_path=/no/such/tools.yaml"],
     f"{MULTI_TURN}.tool_config_path"),
    ("multi-turn with an unknown built-in tool config", [f"{MULTI_TURN}.enable=true",
                                                         f"{MULTI_TURN}.tool_config_path=builtin:tools/nope.yaml"],
     f"{MULTI_TURN}.tool_config_path"),
    ("multi-turn with vLLM at tensor parallel 2", [
        f"{MULTI_TURN}.enable=true", TOOLS, "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        "trainer.n_gpus_per_node=2"], "actor_rollout_ref.rollout.tensor_model_parallel_size"),
    ("vLLM on the CPU at tensor parallel 2", [
        "trainer.device=cpu", "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=2"],
     "actor_rollout_ref.rollout.tensor_model_parallel_size"),
    ("in-process with two workers", ["ray_init.mode=in_process", "trainer.n_gpus_per_node=2"], "ray_init.mode"),
    ("in-process with a runtime_env", ["ray_init.mode=in_process", "+ray_init.runtime_env.env_vars.A=1"],
     "ray_init.mode"),
]
# the checks of files on the server (backend/services/run_config.check_data_files), not of the config alone
FILE_CHECKS = {"multi-turn with a tool config the server lacks", "multi-turn with an unknown built-in tool config"}


@pytest.mark.parametrize(("name", "overrides", "key"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_key_combination_is_refused_naming_the_key_before_any_job(client, settings, name, overrides, key):
    before = stored(client)
    response = client.post(f"{API}/runs", json={"preset": "demo", "overrides": overrides})
    assert response.status_code == 422, f"{name}: {response.status_code} {response.text[:400]}"
    detail = response.json()["detail"]
    assert detail[0]["field"] == key, detail
    assert detail[0]["loc"] == ["body", "config", *key.split(".")]
    assert "Traceback" not in response.text
    assert stored(client) == before  # no run, so no job for the dispatcher to start
    assert not settings.runs_dir.exists() or not any(settings.runs_dir.iterdir())
    if name in FILE_CHECKS:  # files are checked where a run is created, where the job reads them (not the form's)
        return
    # the form's live check answers the same
    checked = client.post(f"{API}/config/validate", json={"preset": "demo", "overrides": overrides})
    assert checked.status_code == 422 and checked.json()["detail"][0]["field"] == key
