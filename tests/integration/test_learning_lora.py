"""Learning with LoRA (issue 27): the tiny model trains only a LoRA adapter and still learns the arithmetic task.

GRPO (`python -m engine.main_ppo --config-name demo_lora`: the GRPO demo with a rank-8 adapter on every linear
layer, lr 1e-3 = 10x the full fine-tune's, 300 steps) is the learning test, run as a user would in a fresh cache,
validating every 25 steps on the 1,000 held-out questions, stopped as soon as two validations in a row average
at least 15 points above the validation before training (test_learning.py's rule, with the issue's +15). Measured
on 2 cores shared with other jobs (load 10-23), seeds 1 / 2 / 3: 29.9% -> +16.2 (mean of steps 150 and 200) /
+15.5 (100 and 150) / +15.7 (100 and 150), 140-185 s into the run; the whole 300-step runs ended at
53.0 / 51.2 / 52.9% (+22.5 / +21.3 / +21.8 over the last two validations), so a slower seed has 100-150 steps and
several points to spare. Validating every 25 steps instead of the preset's 50, the default seed holds the target
at step 175 (150 / 175: 43.8 / 49.1%, +16.6) instead of 200, and keeps it (48.3-53.0% at steps 200-300): 102
instead of 116 CPU seconds for the test.

PPO with a LoRA critic (`--config-name demo_ppo_lora`: the PPO demo, all four roles, with rank-8 adapters on the
actor and on the critic, whose value head trains in full; the reference is the base model with the adapter off)
is the shorter check, to keep the suite's wall time: 50 steps (its cosine lr decays over those), in which held-out
accuracy rises by at least 10 points (one validation after training, so a lower bar than two averaging +15), the
training reward rises, and the critic learns: its explained variance, below zero at step 1 (the value head starts
random), averages at least 0.02 over the last 25 steps. (Its value loss itself does not fall:
it is the returns' variance times 1 - explained variance, and the returns' variance grows as the policy moves
from ~19% to ~22% right in these 50 steps.) Measured (seeds 1 / 2 / 3, 2 shared cores): held-out 29.9% ->
45.7 / 47.6 / 46.5% at step 50; explained variance -0.22 / -0.26 / -0.07 at step 1 -> 0.047 / 0.048 / 0.045 over
steps 26-50; value loss 0.077 / 0.080 / 0.076 (steps 1-25) -> 0.082 / 0.083 / 0.082 (26-50); 76-97 s per run. The
whole 300-step preset: 29.9% -> 58.1%, +15 held from step 100 (engine/configs/demo_ppo_lora.yaml).

How long a run takes is printed, not asserted; the target is per step, not per second.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import build_config
from tests.integration.helpers import SCORE_KEY, VAL_KEY, mean, run_preset, target_reached, validations

GAIN = 0.15
PPO_CHECK_STEPS = 50
EV_KEY = "critic/vf_explained_var"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A fresh cache: the first run prepares the data and the tiny model in it."""
    return tmp_path_factory.mktemp("rlstudio-cache")


def test_lora_presets_are_the_demos_with_an_adapter():
    """demo_lora / demo_ppo_lora are demo / demo_ppo with LoRA on, the lr 10x and (GRPO) 300 steps: nothing else."""
    for lora_name, name in (("demo_lora", "demo"), ("demo_ppo_lora", "demo_ppo")):
        lora, full = build_config([], config_name=lora_name).model_dump(), build_config([], config_name=name).model_dump()
        roles = [("actor_rollout_ref", "actor")] + ([("critic", None)] if full["critic"]["enable"] else [])
        for section, sub in roles:
            model = lora[section]["model"]
            assert (model["lora_rank"], model["lora_alpha"], model["target_modules"]) == (8, 16, "all-linear")
            optim = (lora[section][sub] if sub else lora[section])["optim"]
            full_optim = (full[section][sub] if sub else full[section])["optim"]
            assert optim["lr"] == pytest.approx(10 * full_optim["lr"])
            for key in ("lora_rank", "lora_alpha"):
                model[key] = full[section]["model"][key]
            optim["lr"] = full_optim["lr"]
        for key in ("experiment_name", "default_local_dir", "total_training_steps", "test_freq"):
            lora["trainer"][key] = full["trainer"][key]
        assert lora == full


@pytest.mark.slow
def test_lora_grpo_raises_heldout_accuracy_by_15_points(tmp_path, cache):
    records, console, elapsed = run_preset(tmp_path, cache, "demo_lora", "trainer.test_freq=25",
                                           stop=lambda records: target_reached(validations(records), GAIN))
    val = validations(records)
    print(f"\ndemo_lora (GRPO, LoRA rank 8): {VAL_KEY} {val[0][1]:.3f} at step 0 -> "
          f"{mean(v for _, v in val[-2:]):.3f} (mean of steps {[s for s, _ in val[-2:]]}) in {elapsed:.0f}s "
          f"(whole run incl. start-up); all: {val}")
    assert "n_trainable_params=34816" in console  # the adapter alone trains: 2 layers x 7 linears x 8 x (in + out)
    assert val[0][0] == 0, val
    assert target_reached(val, GAIN), f"held-out accuracy never held +{GAIN:.2f} over two validations: {val}"


@pytest.mark.slow
def test_ppo_with_a_lora_critic_improves_and_its_critic_learns(tmp_path, cache):
    records, console, elapsed = run_preset(tmp_path, cache, "demo_ppo_lora",
                                           f"trainer.total_training_steps={PPO_CHECK_STEPS}",
                                           f"trainer.test_freq={PPO_CHECK_STEPS}")
    train = [r["data"] for r in sorted(records, key=lambda r: r["step"]) if SCORE_KEY in r["data"]]
    val = dict(validations(records))
    ev = [d[EV_KEY] for d in train]
    print(f"\ndemo_ppo_lora ({PPO_CHECK_STEPS} steps) in {elapsed:.0f}s: {VAL_KEY} {val[0]:.3f} -> "
          f"{val[PPO_CHECK_STEPS]:.3f}; training reward {mean(d[SCORE_KEY] for d in train[:25]):.3f} (steps 1-25) -> "
          f"{mean(d[SCORE_KEY] for d in train[-25:]):.3f}; explained variance {ev[0]:.3f} (step 1), "
          f"{mean(ev[:25]):.3f} (1-25) -> {mean(ev[-25:]):.3f} (last 25); value loss "
          f"{mean(d['critic/vf_loss'] for d in train[:25]):.4f} -> {mean(d['critic/vf_loss'] for d in train[-25:]):.4f}")
    assert "roles=actor+rollout+reference+critic" in console, console[:2000]
    assert len(train) == PPO_CHECK_STEPS and sorted(val) == [0, PPO_CHECK_STEPS]
    assert val[PPO_CHECK_STEPS] - val[0] >= 0.10, val  # measured +15.8 to +17.7
    assert mean(d[SCORE_KEY] for d in train[-25:]) > mean(d[SCORE_KEY] for d in train[:25])
    assert ev[0] < 0 and mean(ev[-25:]) >= 0.02, ev  # the critic went from a random head to predicting
