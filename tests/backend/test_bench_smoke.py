"""The server benchmarks run end to end on toy sizes (their numbers are printed by `python -m backend.bench`,
never asserted: speed goals live in benchmarks, not in timed tests)."""
from __future__ import annotations

import subprocess

from tests.backend.conftest import PY, REPO


def test_samples_workload_runs_and_stores_every_answer():
    done = subprocess.run([PY, "-m", "backend.bench", "--workload", "samples", "--answers", "16", "--tokens", "8",
                           "--steps", "2", "--pause", "0", "--chart-steps", "50"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]  # the workload asserts the server holds 16 answers a step
    lines = done.stdout.splitlines()
    assert [line.split(":")[0].strip() for line in lines[1:3]] == ["step 1", "step 2"]
    assert lines[3].startswith("samples ingest, one step of 16 answers: median ")
    assert lines[4].startswith("storage: ") and "KiB per answer" in lines[4]
