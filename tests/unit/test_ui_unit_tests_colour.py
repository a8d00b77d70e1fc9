"""scripts/ui_unit_tests.sh (the Vitest step of scripts/test.sh) writes no colour codes into a log: Vitest colours its
output whenever CI is set, so under CI=true with its output to a pipe (as CI's log is) the script turns colour off."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # the whole Vitest suite, about a minute on two busy cores
def test_vitest_in_ci_writes_no_ansi_colour_codes():
    if not (REPO / "node_modules" / ".bin" / "vitest").exists():
        pytest.skip("no node_modules: scripts/setup.sh installs them (npm ci)")
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")} | {"CI": "true"}
    done = subprocess.run(["bash", "scripts/ui_unit_tests.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900, check=False)  # a hang guard
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "passed" in output and "Test Files" in output
    assert "\x1b[" not in output, [line for line in output.splitlines() if "\x1b[" in line][:5]
