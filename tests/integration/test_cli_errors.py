"""Bad input on the command line: each case ends with exit code 2 and a short message that names the
cause and the fix — no traceback — and leaves nothing half-written.

The cases run `engine.main_ppo.main(argv)` in this process: the command's own code from argv to exit code,
without a new interpreter that imports torch again for each case. One case runs the real `python -m
engine.main_ppo` and checks the process's exit status; the case that needs a Ray of its own (more workers
than the machine has) runs as a real subprocess too, in the slow tier."""
from __future__ import annotations

import json

import pytest

from tests.integration.helpers import base_args, run_engine


def run_bad_subprocess(args, cwd):
    result = run_engine(args, cwd, timeout=300)
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr


@pytest.fixture
def run_bad(capsys, monkeypatch):
    """The command in this process, from the directory the subprocess would run in: its exit code and stderr."""
    from engine.main_ppo import main

    def run(args, cwd):
        monkeypatch.chdir(cwd)
        code = main(list(args))
        out, err = capsys.readouterr()
        assert code == 2, (code, out[-2000:], err[-2000:])
        assert "Traceback" not in err, err[-3000:]
        return err

    return run


def test_exit_status_of_the_real_command(tmp_path):
    err = run_bad_subprocess(["data.train_batch_sise=8"], tmp_path)
    assert "Error: " in err and "data.train_batch_size" in err


def test_help_prints_usage_not_an_error(capsys):
    from engine.main_ppo import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "key=value" in out and "--config-file" in out and "python -m engine.config --json-schema" in out


def test_unknown_key_names_closest(run_bad, tmp_path):
    err = run_bad(["data.train_batch_sise=8"], tmp_path)
    assert "data.train_batch_sise" in err and "data.train_batch_size" in err


def test_wrong_type_names_key_type_and_value(run_bad, tmp_path):
    err = run_bad(["data.train_batch_size=lots"], tmp_path)
    assert "data.train_batch_size" in err and "integer" in err and "lots" in err


def test_batch_sizes_that_do_not_divide(run_bad, tmp_path):
    err = run_bad(["data.train_batch_size=10", "actor_rollout_ref.actor.ppo_mini_batch_size=4"], tmp_path)
    assert "data.train_batch_size" in err and "ppo_mini_batch_size" in err


def test_grpo_without_groups(run_bad, tmp_path):
    err = run_bad(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=1"], tmp_path)
    assert "actor_rollout_ref.rollout.n" in err


def test_config_file_with_overrides_or_never_resolved(run_bad, tmp_path):
    from engine.config import build_config, save_resolved

    resolved = save_resolved(build_config([]), tmp_path / "resolved.json")
    err = run_bad(["--config-file", str(resolved), "data.train_batch_size=8"], tmp_path)
    assert "--config-file" in err and "data.train_batch_size=8" in err and "Edit the file" in err
    (tmp_path / "tree.json").write_text('{"data": {"train_batch_size": 8}}')
    err = run_bad(["--config-file", str(tmp_path / "tree.json")], tmp_path)
    assert "not a resolved config" in err and "python -m engine.config" in err


def test_missing_data_file(run_bad, tiny_model, arith_data, tmp_path):
    args = base_args(tiny_model, arith_data, tmp_path / "o")
    args = [a for a in args if not a.startswith("data.train_files=")] + [f"data.train_files={tmp_path}/nope.parquet"]
    err = run_bad(args, tmp_path)
    assert "nope.parquet" in err and "engine.data" in err


def test_model_path_not_found(run_bad, tiny_model, arith_data, tmp_path):
    args = base_args(str(tmp_path / "no-model"), arith_data, tmp_path / "o")
    err = run_bad(args, tmp_path)
    assert "actor_rollout_ref.model.path" in err and "no-model" in err


def test_parquet_without_prompt_column(run_bad, tiny_model, arith_data, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"question": ["1+1=?"] * 32, "data_source": ["arith"] * 32}), bad)
    args = base_args(tiny_model, arith_data, tmp_path / "o")
    args = [a for a in args if not a.startswith("data.train_files=")] + [f"data.train_files={bad}"]
    err = run_bad(args, tmp_path)
    assert "'prompt'" in err and "data.prompt_key" in err and "question" in err


def test_overlong_prompt_with_truncation_error(run_bad, tiny_model, arith_data, tmp_path):
    args = base_args(tiny_model, arith_data, tmp_path / "o") + ["data.max_prompt_length=5"]
    err = run_bad(args, tmp_path)
    assert "data.max_prompt_length" in err and "filter_overlong_prompts" in err and "truncation" in err


def test_custom_reward_file_missing(run_bad, tiny_model, arith_data, tmp_path):
    args = base_args(tiny_model, arith_data, tmp_path / "o") + [f"custom_reward_function.path={tmp_path}/r.py"]
    err = run_bad(args, tmp_path)
    assert "custom_reward_function.path" in err and "r.py" in err


def test_custom_reward_raising(run_bad, tiny_model, arith_data, tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    raise KeyError('no such field')\n")
    args = base_args(tiny_model, arith_data, tmp_path / "o") + [f"custom_reward_function.path={reward}"]
    err = run_bad(args, tmp_path)
    assert "compute_score" in err and "KeyError" in err and "custom_reward_function" in err


@pytest.mark.ray
@pytest.mark.slow  # the engine starts a Ray of its own to learn that 16 workers do not fit
def test_more_workers_than_the_machine_has(tiny_model, arith_data, tmp_path):
    out = tmp_path / "o"
    args = base_args(tiny_model, arith_data, out) + ["trainer.n_gpus_per_node=16",
                                                     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]
    err = run_bad_subprocess(args, tmp_path)
    assert "trainer.n_gpus_per_node" in err and "16" in err
    # nothing was trained or written as a checkpoint
    assert not (out / "latest_checkpointed_iteration.txt").exists()
    if (out / "metrics.jsonl").exists():
        assert all("training/global_step" not in json.loads(x)["data"]
                   for x in (out / "metrics.jsonl").read_text().splitlines())


def test_vllm_tensor_parallel_on_cpu_is_refused_before_workers_start(run_bad, tiny_model, arith_data, tmp_path):
    args = base_args(tiny_model, arith_data, tmp_path / "o", **{
        "actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
        "trainer.device": "cpu"})
    err = run_bad(args, tmp_path)
    assert "tensor_model_parallel_size" in err and "set it to 1" in err
    assert not (tmp_path / "o").exists()  # refused before anything was written
