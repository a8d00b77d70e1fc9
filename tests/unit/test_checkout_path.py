"""tests/checkout_path.py: a test's subprocess imports this checkout and still sees what PYTHONPATH it inherited
(on the GPU machine, the carried packages); and no test builds a subprocess PYTHONPATH any other way."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.checkout_path import ROOT, checkout_pythonpath, with_checkout

CHILD = "import carried_only_here, tests.checkout_path as c; print(carried_only_here.WHERE, c.__file__)"


def test_a_real_subprocess_keeps_the_inherited_entry_and_finds_the_checkout(tmp_path, monkeypatch):
    carried = tmp_path / "carried"
    carried.mkdir()
    (carried / "carried_only_here.py").write_text("WHERE = 'carried'\n")
    monkeypatch.setenv("PYTHONPATH", str(carried))
    elsewhere = tmp_path / "cwd"  # not the checkout: only PYTHONPATH can make `tests` importable
    elsewhere.mkdir()
    env = with_checkout(EXTRA_FLAG="1")
    assert env["EXTRA_FLAG"] == "1" and env["PYTHONPATH"].split(os.pathsep) == [ROOT, str(carried)]
    run = subprocess.run([sys.executable, "-c", CHILD], cwd=elsewhere, env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    where, module = run.stdout.split()
    assert where == "carried" and Path(module).resolve() == Path(ROOT, "tests", "checkout_path.py").resolve()
    # what replacing PYTHONPATH did (the failure on the GPU machine): the carried module is gone
    gone = subprocess.run([sys.executable, "-c", CHILD], cwd=elsewhere, env=dict(env, PYTHONPATH=ROOT),
                          capture_output=True, text=True, timeout=120, check=False)
    assert gone.returncode != 0 and "No module named 'carried_only_here'" in gone.stderr


def test_empty_or_missing_pythonpath_gives_the_checkout_alone(monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert checkout_pythonpath() == ROOT
    assert with_checkout({"PATH": "/bin"})["PYTHONPATH"] == ROOT
    assert checkout_pythonpath("a" + os.pathsep + "b") == os.pathsep.join([ROOT, "a", "b"])


def test_no_test_sets_a_subprocess_pythonpath_by_hand():
    # `PYTHONPATH=...` / `"PYTHONPATH": ...` not built by the helper is a place that may drop the carried site
    setting = re.compile(r"""PYTHONPATH["']?\s*[:=]""")
    mine = {Path(ROOT, "tests", "checkout_path.py"), Path(__file__).resolve()}
    found = [f"{p.relative_to(ROOT)}:{n}" for p in Path(ROOT, "tests").rglob("*.py") if p.resolve() not in mine
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if setting.search(line) and "checkout_pythonpath(" not in line]
    assert not found, f"set PYTHONPATH through tests.checkout_path.with_checkout/checkout_pythonpath: {found}"
