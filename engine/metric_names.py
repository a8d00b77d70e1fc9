"""The names of the metrics the engine logs that others read by name: the server's health checks and runs list
(backend/services/health/, held_out.py, metrics.py), the console logger, the client's sweep. verl's names, kept so
that a verl run's logs read the same. Pure (no torch, no other import): the server imports it cheaply.

A producer in the engine writes these names through the constants where it can; tests/unit/test_metric_names.py
checks that each one is still written somewhere in the engine, so a rename here or there cannot pass unseen."""
from __future__ import annotations

import re

# the step counter and the run's length (every training step)
GLOBAL_STEP = "training/global_step"
TOTAL_STEPS = "training/total_steps"

# the score and the answers (trainer/metrics.py)
SCORE = "critic/score/mean"
RESPONSE_LENGTH = "response_length/mean"
RESPONSE_CLIP_RATIO = "response_length/clip_ratio"  # share of answers cut at the length cap
VALUES_STD = "critic/values/std"
ENTROPY = "actor/entropy"

# the update (workers/actor.py, workers/update.py, algos/kl.py)
ACTOR_LR = "actor/lr"
ACTOR_GRAD_NORM = "actor/grad_norm"
PG_CLIPFRAC = "actor/pg_clipfrac"
KL_IN_REWARD = "actor/reward_kl_penalty"  # KL to the reference, folded into the reward (PPO)
KL_LOSS = "actor/kl_loss"  # KL to the reference, as a loss term
GRAD_NORM_NONFINITE = "grad_norm_nonfinite"  # `<role>/grad_norm_nonfinite`: 1 where the optimizer step was skipped
ROLES = ("actor", "critic")

# the rollout against the actor (trainer/rollout_mismatch.py)
ROLLOUT_PROBS_DIFF_MEAN = "training/rollout_probs_diff_mean"
ROLLOUT_LOG_PROBS_ABSDIFF = "actor/rollout_log_probs_absdiff"

# the weight sync reached the rollout (rollout/freshness.py)
WEIGHTS_STALE = "rollout/weights_stale"
WEIGHT_FINGERPRINT_GAP = "rollout/weight_fingerprint_gap"
ACTOR_WEIGHT_CHANGE = "rollout/actor_weight_change"
STALE_PARAMS = "rollout/stale_params"

# multi-turn rollouts (rollout/metrics.py)
TOOL_CALLS = "tool_call_counts/mean"
TURNS = "num_turns/mean"

# GRPO groups whose answers all scored alike (trainer/learning_signal.py)
ZERO_STD_GROUP_RATIO = "train/zero_std_group_ratio"

# phase times: `timing_s/<phase>` (gen, update_actor, validation, ...)
TIMING_PREFIX = "timing_s/"

# validation (trainer/validation_metrics.py): `val-core/<source>/<var>/<stat>`; the held-out score is the core
# variable's mean@N (`acc` when the reward returns it, else `reward`); best@/maj@/std@ are not scores
VAL_CORE_PREFIX = "val-core/"
VAL_SCORE_PATTERN = r"val-core/.+/(acc|reward)/mean@\d+"
VAL_SCORE = re.compile(f"^{VAL_SCORE_PATTERN}$")


def grad_norm_nonfinite(role: str) -> str:
    return f"{role}/{GRAD_NORM_NONFINITE}"


SKIPPED_STEP_KEYS = tuple(grad_norm_nonfinite(r) for r in ROLES)
