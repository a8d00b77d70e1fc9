"""The real model learns on CPU (issue 37): `python -m engine.main_ppo --config-name real_next_number` (SmolLM2-135M-
Instruct, GRPO with a rank-16 LoRA adapter, "What number comes after 674?") on the session's prepared model folder,
validated (greedy) after every step on the first 30 of the 99 held-out numbers, and stopped as soon as two validations in
a row average at least 10 points above step 0's (the learning tests' rule, a smaller target than the benchmark's
+15). A model that does not learn cannot pass: greedy validation of unchanged weights repeats step 0's score. The
test waits for that state (the run's metrics), never for a time; the run's own end (step 15) fails it.

Test-only overrides keep it short (the preset itself is the benchmark's): lr 4e-4 instead of the preset's 2e-4 (a
first guess, not tuned), a validation after every step instead of every 5th, on 30 numbers. On 2 cores a step takes ~60-110 s
and a validation of 50 numbers ~40-70 s, depending on the load, so every step and validation saved is a minute.
Measured on 2 cores shared with other work (2026-12-07), lr 4e-4, 50 numbers every 2 steps: seed 1 (the preset's),
load 6-13: 40% -> 46% (step 2) -> 80% (step 4), +23 held at step 4, 513 s; seed 2 (data.seed = trainer.seed = 2),
load 9-12: 40% -> 64% -> 60%, +22 at step 4, 712 s (the same run's first 30 numbers: 43.3 -> 66.7 -> 66.7%, +23.3).
As committed (30 numbers), seed 1, load 10-19: 43.3% -> 56.7% (step 2) -> 80.0% (step 4), +25 at step 4, 822 s
(the wall time follows the load: 4 steps and 3 validations of 30 numbers where it was 6 steps and 3 of 50).
Seed 3 (30 numbers, load 9-22) learns late, as it did in the benchmark at the preset's lr (29.3% at step 5, 53.5%
at step 10): 43.3% -> 30.0% (step 2) -> 36.7% (step 4), stopped by hand there, so not held by step 4; the test
runs seed 1, and a run that has not held the target goes on validating after every step up to step 15.
Validating every step instead of every 2nd (2026-12-07, seed 1, load 3-7): 43.3% -> 56.7% (step 1) -> 56.7%
(step 2), +13.4 held at step 2 instead of 4: 2 training steps and 3 validations where it was 4 and 3, 503 s and
186 CPU s (user + sys of pytest and the run) against 281 CPU s for every 2nd step measured the same way
(held at step 4, 43.3 -> 56.7 / 80.0%, 1,053 s at load 4-19: a higher load than the new run's, which inflates CPU seconds
somewhat). Seed 2 (data.seed = trainer.seed = 2), load 9-27: 43.3% -> 50.0% -> 66.7%, +15.0 held at step 2, 183 CPU s.
Before, at the preset's lr validating 50 numbers every 3 steps: 40% -> 48% (step 3) -> 62% (step 6), 642-660 s.
Time is printed, never asserted."""
from __future__ import annotations

import pytest

from tests.integration.helpers import run_preset, target_reached, validations

VAL = "val-core/next_number/reward/mean@1"
GAIN = 0.10
FASTER = ("actor_rollout_ref.actor.optim.lr=4e-4", "trainer.test_freq=1", "data.val_max_samples=30",
          "trainer.total_training_steps=15")


@pytest.mark.slow
def test_real_model_raises_heldout_accuracy(tmp_path, smollm2_dir):
    records, console, elapsed = run_preset(
        tmp_path, tmp_path / "cache", "real_next_number", f"actor_rollout_ref.model.path={smollm2_dir}", *FASTER,
        stop=lambda recs: target_reached(validations(recs, VAL), GAIN))
    val = validations(records, VAL)
    print(f"held-out {[(s, round(v, 3)) for s, v in val]} in {elapsed:.0f} s")
    assert val and val[0][0] == 0, console[-3000:]
    assert target_reached(val, GAIN), f"held-out {val}: no two validations in a row {GAIN:+.0%} over step 0\n{console[-3000:]}"
