"""A pasted command line (the New run form's paste box, through POST /api/v1/config/parse): the shell's wrapping
undone, then the engine's own override grammar, the one `python -m engine.main_ppo key=value` parses with."""
from __future__ import annotations

from engine.config import parse_command
from engine.config.overrides import shell_split

SEED = """PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo \\
 data.train_files=$HOME/data/gsm8k/train.parquet \\
 data.val_files=$HOME/data/gsm8k/test.parquet \\
 data.train_batch_size=256 \\
 data.max_prompt_length=512 \\
 data.max_response_length=256 \\
 actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \\
 actor_rollout_ref.actor.optim.lr=1e-6 \\
 actor_rollout_ref.actor.ppo_mini_batch_size=64 \\
 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \\
 actor_rollout_ref.rollout.name=naive \\
 actor_rollout_ref.rollout.tensor_model_parallel_size=1 \\
 actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \\
 critic.optim.lr=1e-5 \\
 critic.model.path=Qwen/Qwen2.5-0.5B-Instruct \\
 algorithm.kl_ctrl.kl_coef=0.001 \\
 trainer.logger=['console'] \\
 trainer.val_before_train=False \\
 trainer.n_gpus_per_node=1 \\
 trainer.nnodes=1 \\
 trainer.save_freq=10 \\
 trainer.test_freq=10 \\
 trainer.total_epochs=15 2>&1 | tee verl_demo.log"""


def values(cmd):
    return {o.key: o.value for o in cmd.overrides if o.op != "delete"}


def test_the_seed_command():
    cmd = parse_command(SEED)
    assert cmd.module == "verl.trainer.main_ppo" and cmd.env == {"PYTHONUNBUFFERED": "1"} and cmd.ignored == []
    got = values(cmd)
    assert len(got) == 22
    assert got["data.train_files"] == "$HOME/data/gsm8k/train.parquet"
    assert got["data.train_batch_size"] == 256 and got["actor_rollout_ref.actor.optim.lr"] == 1e-6
    assert got["actor_rollout_ref.rollout.gpu_memory_utilization"] == 0.4
    assert got["trainer.logger"] == ["console"] and got["trainer.val_before_train"] is False
    assert got["trainer.total_epochs"] == 15


def test_plus_force_delete_and_quoted_lists():
    cmd = parse_command("""python -m engine.main_ppo --config-name demo "trainer.logger=['console','wandb']" """
                        "+new.key=v ++x.y=2 ~a.b ~c.d=3")
    assert cmd.config_name == "demo"
    assert [(o.op, o.key, o.value) for o in cmd.overrides] == [
        ("set", "trainer.logger", ["console", "wandb"]), ("add", "new.key", "v"), ("force", "x.y", 2),
        ("delete", "a.b", None), ("delete", "c.d", 3)]
    assert parse_command("python -m m --config-name=gsm8k_grpo -u a=1").config_name == "gsm8k_grpo"


def test_values_as_the_job_reads_them():
    cmd = parse_command("""python -m m "x.name=hello world" y.d={a:1,b:'two'} z.n=-3 w.big=1_000 v.f=.5 """
                        "u.e=1.0E-4 a.b=[1,2.5,null] p=~/data/train.parquet q=\"'123'\"")
    assert values(cmd) == {"x.name": "hello world", "y.d": {"a": 1, "b": "two"}, "z.n": -3, "w.big": 1000,
                           "v.f": 0.5, "u.e": 1e-4, "a.b": [1, 2.5, None], "p": "~/data/train.parquet", "q": "123"}


def test_bare_overrides_and_ray_job_submit():
    bare = parse_command("data.train_batch_size=8\nalgorithm.adv_estimator=grpo")
    assert bare.module is None and values(bare) == {"data.train_batch_size": 8, "algorithm.adv_estimator": "grpo"}
    cmd = parse_command("ray job submit --address http://127.0.0.1:8265 -- python -m engine.main_ppo a.b=1")
    assert cmd.module == "engine.main_ppo" and values(cmd) == {"a.b": 1}


def test_stray_tokens_are_reported_not_applied():
    cmd = parse_command("python -m m a.b=1 stray a..b=2 =3")
    assert values(cmd) == {"a.b": 1} and cmd.ignored == ["stray", "a..b=2", "=3"]


def test_the_shell_wrapping():
    assert shell_split("a b=1 2>&1 | tee x") == ["a", "b=1"]
    assert shell_split("a > out.log") == ["a"]
    assert shell_split("a 'b c' \"d\\\"e\"") == ["a", "b c", 'd"e']
    assert shell_split("a \\\n b # a comment") == ["a", "b"]
    assert shell_split("a && b; c") == ["a"]
