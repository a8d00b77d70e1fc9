"""verl 0.9's layout is a second spelling of the schema; verl 0.9's example scripts resolve; every verl 0.9 key is
known, an alias, or refused by name; and the defaults that differ from verl 0.9.1 are exactly the table in docs/verl-compat.md."""
import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from engine.config import ConfigError, PPOConfig, all_keys, build_config, flatten
from engine.config.loader import check_keys
from engine.config.overrides import Override
from engine.config.verl_layout import canonical_key, unsupported_reason
from engine.workers.launch import uses_ray, worker_env

ROOT = Path(__file__).resolve().parents[2]
DATA = "~/data/gsm8k"  # the examples' data paths are only resolved (not read) here

# verl 0.9.0's examples/ppo_trainer/run_qwen3_8b_fsdp.sh (GPU branch, defaults expanded), local paths
PPO_QWEN3_8B = [
    "algorithm.adv_estimator=gae", f"data.train_files=['{DATA}/train.jsonl', '{DATA}/train.jsonl']",
    f"data.val_files=['{DATA}/test.jsonl', '{DATA}/test.jsonl']", "data.train_batch_size=1024",
    "data.max_prompt_length=1024", "data.max_response_length=2048", "data.filter_overlong_prompts=True",
    "data.truncation=error", "actor_rollout_ref.model.path=builtin:tiny", "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True", "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256", "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24576", "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False", "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "actor_rollout_ref.rollout.n=1",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=24576", "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=24576", "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=builtin:tiny", "critic.model.use_remove_padding=True", "critic.model.enable_gradient_checkpointing=True",
    "critic.optim.lr=1e-5", "critic.use_dynamic_bsz=True", "critic.ppo_max_token_len_per_gpu=24576",
    "critic.fsdp.param_offload=False", "critic.fsdp.optimizer_offload=False", "trainer.balance_batch=True",
    "trainer.critic_warmup=0", "trainer.logger=[\"console\",\"wandb\"]", "trainer.project_name=verl_ppo_gsm8k_math",
    "trainer.experiment_name=qwen3_8b_ppo_vllm_fsdp", "trainer.n_gpus_per_node=8", "trainer.nnodes=1",
    "trainer.save_freq=20", "trainer.test_freq=5", "trainer.total_epochs=15",
]
# verl 0.9.0's examples/grpo_trainer/run_qwen3_8b_fsdp.sh (GPU branch), local paths
GRPO_QWEN3_8B = [
    "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=False",
    f"data.train_files=['{DATA}/train.jsonl']", f"data.val_files=['{DATA}/test.jsonl']", "data.train_batch_size=1024",
    "data.max_prompt_length=1024", "data.max_response_length=2048", "data.filter_overlong_prompts=True",
    "data.truncation=error", "actor_rollout_ref.model.path=builtin:tiny", "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True", "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256", "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24576", "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001", "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff=0", "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False", "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
    "actor_rollout_ref.rollout.n=5", "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=24576", "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=24576", "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "trainer.balance_batch=True", "trainer.logger=[\"console\",\"wandb\"]", "trainer.project_name=verl_grpo_gsm8k_math",
    "trainer.experiment_name=qwen3_8b_grpo_vllm_fsdp", "trainer.n_gpus_per_node=8", "trainer.nnodes=1",
    "trainer.save_freq=20", "trainer.test_freq=5", "trainer.total_epochs=15",
    "ray_kwargs.ray_init.runtime_env.py_executable=null",  # its launch block with VERL_USE_UV=0
]
UV_WORKERS = "uv -v run --frozen --all-packages --extra vllm --extra fsdp"  # ... and without it: workers under uv
# its MACHINE=gb200 extras
GB200 = ["actor_rollout_ref.rollout.enforce_eager=True", "actor_rollout_ref.rollout.free_cache_engine=True",
         "actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16", "+ray_kwargs.ray_init.num_gpus=4",
         "trainer.n_gpus_per_node=4"]


def test_verl_09_ppo_example_resolves():
    cfg = build_config(PPO_QWEN3_8B)
    assert cfg.critic.enable and cfg.critic.model.fsdp_config.param_offload is False
    assert cfg.actor_rollout_ref.ref.fsdp_config.param_offload is True


def test_verl_09_grpo_example_resolves_with_its_gb200_extras():
    cfg = build_config(GRPO_QWEN3_8B + GB200)
    assert cfg.ray_init.num_gpus == 4 and cfg.actor_rollout_ref.rollout.n == 5 and not cfg.critic.enable


def test_verl_09_grpo_example_with_uv_workers_passes_the_runtime_env_on():
    cfg = build_config(GRPO_QWEN3_8B[:-1] + [f"ray_kwargs.ray_init.runtime_env.py_executable={UV_WORKERS}"])
    assert cfg.ray_init.runtime_env == {"py_executable": UV_WORKERS}


def test_a_null_runtime_env_entry_asks_for_nothing():
    for null in ("ray_kwargs.ray_init.runtime_env.py_executable=null", "ray_kwargs.ray_init.runtime_env=null"):
        cfg = build_config([null])
        assert cfg.ray_init.runtime_env == {}
        assert not uses_ray(cfg)  # one worker, nothing asked of Ray: still in-process
        assert not uses_ray(build_config([null, "ray_init.mode=in_process"]))


def test_runtime_env_values_reach_ray_as_it_wants_them():
    cfg = build_config(["ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS=4",
                        "++ray_kwargs.ray_init.runtime_env.env_vars.MY_FLAG=on", "ray_init.runtime_env.env_vars.X=null"])
    assert cfg.ray_init.runtime_env == {"env_vars": {"OMP_NUM_THREADS": "4", "MY_FLAG": "on"}}  # strings, as Ray wants
    assert uses_ray(cfg)  # asked of Ray's workers: the one worker runs through Ray
    assert worker_env(cfg)["OMP_NUM_THREADS"] == "4" and worker_env(cfg)["TOKENIZERS_PARALLELISM"] == "false"
    # refused by the config's resolve, naming the key (the server answers a 422 before the run starts)
    with pytest.raises(ConfigError, match=r"ray_init.runtime_env .*ray_kwargs.ray_init.runtime_env.*ray_init.mode=in_"
                       ) as refused:
        build_config(["ray_kwargs.ray_init.runtime_env.env_vars.A=1", "ray_init.mode=in_process"])
    assert refused.value.key == "ray_init.mode"


@pytest.mark.parametrize("arg, words", [
    ("ray_kwargs.ray_init.runtime_env.working_dir=5", "`working_dir` must be a string"),
    ("ray_kwargs.ray_init.runtime_env.env_vars=5", "env_vars.MY_VAR=1"),
])
def test_a_runtime_env_ray_refuses_names_the_key(arg, words):
    with pytest.raises(ConfigError, match="ray_kwargs.ray_init.runtime_env") as err:
        build_config([arg])
    assert words in str(err.value)


@pytest.mark.parametrize("args", [["trainer.use_v1=False"], ["trainer.use_v1=True"], ["trainer.v1.trainer_mode=sync"],
                                  ["trainer.use_v1=True", "trainer.v1.trainer_mode=sync"],
                                  # verl's legacy trainer never reads trainer.v1: synchronous whatever it says
                                  ["trainer.use_v1=False", "trainer.v1.trainer_mode=separate_async"]])
def test_verl_09_synchronous_trainer_switches_resolve(args):
    cfg = build_config(args)
    assert cfg.trainer.v1.trainer_mode in ("sync", "separate_async")


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_the_asynchronous_trainer_modes_resolve(mode):
    """Their checks and refusals: tests/unit/test_config_async.py."""
    args = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "trainer.v1.separate_async.parameter_sync_step=4"]
    assert build_config([f"trainer.v1.trainer_mode={mode}"] + args).trainer.v1.trainer_mode == mode
    cfg = build_config(base={"trainer": {"use_v1": True, "v1": {"trainer_mode": mode}},  # the API's payloads
                             "data": {"train_batch_size": 8}, "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 2}}})
    assert cfg.trainer.v1.trainer_mode == mode


def test_verl_09_dapo_reward_keys_resolve():
    """The reward lines of verl 0.9.0's DAPO-style examples (e.g. examples/grpo_trainer/run_deepseek_v3_671b_megatron.sh)."""
    cfg = build_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "data.max_response_length=64",
                        "reward.reward_manager.name=dapo", "+reward.reward_kwargs.overlong_buffer_cfg.enable=True",
                        "+reward.reward_kwargs.overlong_buffer_cfg.len=16",
                        "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
                        "+reward.reward_kwargs.overlong_buffer_cfg.log=False", "+reward.reward_kwargs.max_resp_len=64"])
    rm = cfg.reward_model
    assert rm.reward_manager == "dapo" and rm.reward_kwargs.overlong_buffer_cfg.len == 16
    assert rm.reward_kwargs.max_resp_len == 64


def test_both_layouts_give_one_canonical_config():
    old = build_config(["critic.model.fsdp_config.param_offload=True", "critic.model.fsdp_config.optimizer_offload=True",
                        "ray_init.num_cpus=3", "custom_reward_function.name=score", "reward_model.enable=False",
                        "actor_rollout_ref.actor.grad_clip=0.5"])
    new = build_config(["critic.fsdp.param_offload=True", "critic.fsdp.optimizer_offload=True",
                        "ray_kwargs.ray_init.num_cpus=3", "reward.custom_reward_function.name=score",
                        "reward.reward_model.enable=False", "actor_rollout_ref.actor.optim.clip_grad=0.5"])
    assert old.model_dump() == new.model_dump()
    tree = build_config(base={"critic": {"fsdp": {"param_offload": True, "optimizer_offload": True}}})
    assert tree.critic.model.fsdp_config.param_offload is True  # API payloads in verl 0.9's layout too


def test_two_spellings_with_different_values_are_an_error():
    with pytest.raises(ConfigError, match="critic.fsdp.param_offload.*two spellings|two spellings"):
        build_config(["critic.model.fsdp_config.param_offload=True", "critic.fsdp.param_offload=False"])


def test_a_typo_is_still_a_typo():
    with pytest.raises(ConfigError, match="Did you mean: actor_rollout_ref.rollout.temperature"):
        build_config(["actor_rollout_ref.rollout.temperatur=0.5"])


# ------------------------------------------------------------------------- against verl 0.9.1's own config
def _verl_config() -> dict:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl==0.9.1 (the reference) is not installed: run scripts/setup.sh")
    path = Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    return yaml.safe_load(path.read_text())


def _leaves(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if key == "_target_":
            continue
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def test_every_verl_key_is_known_an_alias_or_refused_by_name():
    unhandled = []
    for key, value in _leaves(_verl_config()):
        try:
            check_keys([Override(key, value, add=False)])
        except ConfigError as exc:
            if unsupported_reason(key) is None:
                unhandled.append(f"{key}: {exc}")
    assert not unhandled, "\n".join(unhandled)


def _verl_defaults() -> dict:
    """verl's defaults of the keys both schemas have (verl 0.9's spelling wins over its all-unset legacy block)."""
    keys, out = set(all_keys()), {}
    for key, value in _leaves(_verl_config()):
        canon = canonical_key(key)
        if canon in keys and (canon not in out or key != canon):
            out[canon] = value
    return out


def _readme_table_keys() -> set[str]:
    text = (ROOT / "docs" / "verl-compat.md").read_text()
    table = text.split("## Defaults that differ from verl")[1].split("\n## ")[0]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    return {k for cell in first_cells for k in re.findall(r"`([\w.]+)`", cell)}


def test_defaults_that_differ_from_verl_are_the_readme_table():
    ours, verl = flatten(PPOConfig().model_dump()), _verl_defaults()
    differ, required = set(), set()
    for key, value in verl.items():
        if isinstance(value, str) and ("${" in value or value == "???"):
            required.add(key)  # interpolated or required in verl: compared by the resolve tests instead
        elif ours[key] != value:
            differ.add(key)
    listed = _readme_table_keys() & set(verl)  # rows about rlstudio-only keys or behaviours are not compared
    assert differ <= listed, f"defaults that differ from verl 0.9.1, missing in the docs/verl-compat.md table: {differ - listed}"
    assert listed <= differ | required, f"docs/verl-compat.md table rows whose default equals verl's: {listed - differ - required}"


def test_the_json_schema_carries_the_aliases_for_the_ui():
    from engine.config import json_schema
    from engine.config.verl_layout import ALIASES

    assert [tuple(pair) for pair in json_schema()["x-verl-aliases"]] == list(ALIASES)
