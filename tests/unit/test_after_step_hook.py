"""The trainer's after-step hook (engine/trainer/hooks.py) and the tests' step gate on it (tests/step_hold.py)."""
from __future__ import annotations

import threading

import pytest

from engine.trainer import AFTER_STEP_ENV
from engine.trainer.hooks import after_step_hook
from tests import step_hold
from tests.waiting import wait_for


def test_unset_is_no_hook_and_a_spec_names_a_function(monkeypatch):
    monkeypatch.delenv(AFTER_STEP_ENV, raising=False)
    assert after_step_hook() is None
    monkeypatch.setenv(AFTER_STEP_ENV, step_hold.HOOK)
    assert after_step_hook() is step_hold.hold_after
    for bad in ("tests.step_hold", "tests.step_hold:no_such_function", ":hold_after"):
        with pytest.raises(ValueError, match=AFTER_STEP_ENV):
            after_step_hook(bad)


def test_the_step_gate_holds_after_its_step_until_its_file_goes(tmp_path, monkeypatch):
    monkeypatch.setenv(step_hold.DIR_ENV, str(tmp_path))
    (tmp_path / "step-2").touch()

    class Trainer:
        waited = 0

        def wait_for_checkpoint(self):
            self.waited += 1

    trainer = Trainer()
    step_hold.hold_after(1, trainer)  # no gate for step 1: returns at once
    assert trainer.waited == 0 and not (tmp_path / "held-1").exists()
    holding = threading.Thread(target=step_hold.hold_after, args=(2, trainer), daemon=True)
    holding.start()
    # the held file is written before the wait; a thread that ended cannot write it any more
    wait_for(lambda: (tmp_path / "held-2").exists() or not holding.is_alive(), 60, 0.1, "held-2")
    assert (tmp_path / "held-2").read_text().isdigit() and trainer.waited == 1
    assert holding.is_alive()  # held while the gate is there
    (tmp_path / "step-2").unlink()
    holding.join(60)
    assert not holding.is_alive()
