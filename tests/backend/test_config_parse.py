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


def test_the_form_reads_typed_values_and_writes_its_command_through_the_engines_grammar(client):
    """The New run form has no grammar of its own: POST /config/values reads what was typed, POST /config/command
    writes the command, both with engine/config/values.py."""
    texts = ["[q_proj, v_proj]", "1e-6", "true", "null", "{a: 1, b: [x, 'y z']}", "~/data/train.parquet", "inf"]
    r = client.post(f"{API}/config/values", json={"texts": texts})
    assert r.status_code == 200, r.text
    assert r.json()["values"] == [{"text": t, "value": v} for t, v in zip(texts, [
        ["q_proj", "v_proj"], 1e-6, True, None, {"a": 1, "b": ["x", "y z"]}, "~/data/train.parquet", "inf"])]
    r = client.post(f"{API}/config/command", json={"values": {"actor_rollout_ref.model.target_modules": ["q_proj", "v_proj"],
                                                             "trainer.val_before_train": True}, "config_name": "demo_ppo"})
    assert r.status_code == 200, r.text
    assert r.json()["command"] == ("python -m engine.main_ppo --config-name demo_ppo \\\n"
                                   '    "actor_rollout_ref.model.target_modules=[q_proj,v_proj]" \\\n'
                                   "    trainer.val_before_train=true")


def test_bad_value_and_command_requests_are_422s_naming_the_field(client):
    for body in ({}, {"texts": "[1]"}, {"texts": ["x" * 10_001]}, {"texts": ["1"] * 201}):
        r = client.post(f"{API}/config/values", json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["detail"][0]["loc"][:2] == ["body", "texts"], r.text
    for body, field in (({}, "values"), ({"values": [1]}, "values"), ({"values": {}, "config_name": 3}, "config_name")):
        r = client.post(f"{API}/config/command", json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["detail"][0]["loc"][:2] == ["body", field], r.text
