"""One value grammar (engine/config/values.py): what format_value writes, parse_value reads back as the same value,
and the server and the client use these functions rather than writers of their own."""
from __future__ import annotations

import math

import pytest

from backend.client.sweep import split_top_level
from backend.services import run_config
from engine.config import values
from engine.config.overrides import parse_overrides

CASES = [None, True, False, 0, -3, 1e-6, 3.5, float("inf"), "plain", "with space", "it's", "true", "null", "123",
         "~/data/train.parquet", "a,b", [1, "x", None], [], {"a": 1, "b": [True, "y z"]}, {"nested": {"k": False}}]


@pytest.mark.parametrize("value", CASES, ids=[repr(v) for v in CASES])
def test_what_is_written_reads_back_as_the_same_value(value):
    text = values.format_value(value)
    assert values.parse_value(text) == value
    assert parse_overrides([f"some.key={text}"])[0].value == value  # the command line's reader is the same


def test_booleans_and_null_are_written_as_hydra_spells_them():
    assert values.format_value(True) == "true" and values.format_value(None) == "null"
    assert values.parse_value("True") is True and values.parse_value("true") is True
    assert math.isinf(values.parse_value("inf"))


def test_the_server_and_the_client_use_the_engines_grammar():
    assert run_config.format_value is values.format_value
    assert split_top_level is values.split_choices
    assert values.split_choices("1e-4,3e-4") == ["1e-4", "3e-4"]


def test_the_command_runs_in_a_shell_and_reads_back_as_the_same_values(tmp_path):
    """`command_text` (the New run form's "As a command"): what bash hands the program is what the engine reads back,
    brackets and braces included (bash would glob `[a,b]` or brace-expand `{a:1,b:2}` if they went unquoted)."""
    import subprocess

    from engine.config import parse_command

    written = {f"k{i}.v": value for i, value in enumerate(CASES) if not (isinstance(value, float) and math.isinf(value))}
    written["with.dollar"] = "$HOME and `ls` and \"quotes\""
    command = values.command_text(written, "demo_ppo")
    assert command.splitlines()[0] == "python -m engine.main_ppo --config-name demo_ppo \\"
    (tmp_path / "a=1").touch()  # a file a glob of `[1,2]` would match
    argv = subprocess.run(["bash", "-c", command.replace("python -m engine.main_ppo", "printf '%s\\0'", 1)],
                          cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
    cmd = parse_command(" ".join(["python", "-m", "engine.main_ppo", *map(_sh, argv)]))
    assert cmd.config_name == "demo_ppo"
    assert {o.key: o.value for o in cmd.overrides} == written


def _sh(token: str) -> str:
    import shlex

    return shlex.quote(token)
