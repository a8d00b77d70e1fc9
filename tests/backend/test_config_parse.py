"""POST /config/parse: the New run form's paste box asks the server to read a command line, with the engine's
own override grammar; and a config error's 422 names the key and, apart, the fix."""
from __future__ import annotations

API = "/api/v1"


def test_a_pasted_command_is_read_as_the_job_reads_it(client):
    r = client.post(f"{API}/config/parse", json={"command": (
        "PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo --config-name demo \\\n"
        "  critic.fsdp.param_offload=False actor_rollout_ref.actor.optim.clip_grad=0.5 "
        "+ray_kwargs.ray_init.num_gpus=4 trainer.logger=['console'] a.b=1 ~a.b x.y=inf stray 2>&1 | tee log")})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["module"] == "verl.trainer.main_ppo" and got["config_name"] == "demo"
    assert got["env"] == {"PYTHONUNBUFFERED": "1"} and got["ignored"] == ["stray"]
    # verl 0.9's spellings in the canonical layout the form shows; what the user wrote stays visible
    assert got["values"] == {"critic.model.fsdp_config.param_offload": False, "actor_rollout_ref.actor.grad_clip": 0.5,
                             "ray_init.num_gpus": 4, "trainer.logger": ["console"], "x.y": "inf"}
    assert got["overrides"][0] == {"op": "set", "key": "critic.model.fsdp_config.param_offload", "value": False,
                                   "raw": "critic.fsdp.param_offload=False"}
    assert [o["op"] for o in got["overrides"]] == ["set", "set", "add", "set", "set", "delete", "set"]
    assert got["deleted"] == ["a.b"]


def test_a_bad_parse_request_is_a_422_naming_the_field(client):
    for body in ({}, {"command": 3}, {"command": "a=1" * 100_000}):
        r = client.post(f"{API}/config/parse", json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["detail"][0]["loc"] == ["body", "command"]
    assert client.post(f"{API}/config/parse", json={"command": ""}).json()["values"] == {}


def test_a_config_error_names_the_key_and_the_fix(client):
    r = client.post(f"{API}/config/validate", json={"overrides": ["actor_rollout_ref.actor.optim.lrr=1e-6"]})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["field"] == "actor_rollout_ref.actor.optim.lrr"
    assert detail["loc"] == ["body", "config", "actor_rollout_ref", "actor", "optim", "lrr"]
    assert detail["fix"].startswith("Did you mean: actor_rollout_ref.actor.optim.lr")
    assert detail["msg"].endswith(detail["fix"])
