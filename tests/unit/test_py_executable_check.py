"""The launch's check of `ray_init.runtime_env.py_executable` (engine/workers/launch.py), run for real (bash and
the interpreters it names; no Ray): a command that cannot import ray is refused with what it said."""
from __future__ import annotations

import sys

import pytest

from engine.config import ConfigError, build_config
from engine.workers.launch import check_py_executable


def cfg(py_executable: str, *more: str):
    return build_config(["trainer.n_gpus_per_node=1", f"ray_kwargs.ray_init.runtime_env.py_executable={py_executable}",
                         *more])


def test_a_missing_interpreter_is_refused_naming_the_key_and_the_cause():
    with pytest.raises(ConfigError) as raised:
        check_py_executable(cfg("/nonexistent/python3"), here=True)
    text = str(raised.value)
    assert "ray_init.runtime_env.py_executable" in text and "'/nonexistent/python3'" in text
    assert "/nonexistent/python3: No such file or directory" in text and "exited with 127" in text


def test_an_interpreter_without_ray_is_refused(tmp_path):
    bare = tmp_path / "bare-python"  # a Python that starts but has no ray (-I: no site-packages of this venv)
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    bare.chmod(0o755)
    with pytest.raises(ConfigError, match="No module named 'ray'"):
        check_py_executable(cfg(str(bare)), here=True)


def test_a_working_interpreter_or_a_cluster_elsewhere_passes():
    check_py_executable(cfg(sys.executable), here=True)  # this one has ray
    check_py_executable(cfg("/nonexistent/python3"), here=False)  # workers start on other nodes: not tried here
    check_py_executable(build_config(["trainer.n_gpus_per_node=1"]), here=True)  # none set
