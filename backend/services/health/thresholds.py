"""Every threshold of run health, here and nowhere else (served as `thresholds` by GET /runs/{id}/health).

An alarm is judged step by step: a step is *bad* or *good* for it. It fires once its condition held for
`fire_after` consecutive judged steps (its `since_step` is the first of them) and clears once it failed for
`clear_after` consecutive judged steps (its `cleared_step` is the last of them). The ids, thresholds and meaning
of the first group are those the UI computed before (frontend/src/lib/alarms.ts, the seed's debugging checklist).
"""
from __future__ import annotations

THRESHOLDS: dict[str, float] = {
    # -- ported from the UI --------------------------------------------------------------------------------
    # healthy KL to the reference lies in [kl_low, kl_high] (the band shaded on the KL chart)
    "kl_high": 0.1,
    "kl_low": 0.01,
    # a KL outside the band this many consecutive steps raises kl-high / kl-low
    "kl_steps": 5,
    # KL starts at 0 (policy = reference): "too low" is judged only after this step
    "kl_low_grace_steps": 10,
    # critic/values/std below this for values_std_steps consecutive steps: the critic predicts a constant
    "values_std_min": 0.01,
    "values_std_steps": 3,
    # score collapse: the mean of the last score_window steps falls below score_drop_ratio x the best earlier
    # window mean (windows that end before the recent one starts), and that best was at least score_min_best
    "score_window": 5,
    "score_drop_ratio": 0.5,
    "score_min_best": 0.1,
    # more than this share of responses hit max_response_length for clip_steps consecutive steps
    "clip_ratio_max": 0.5,
    "clip_steps": 3,
    # degenerate answer: empty, the same token repeat_run times in a row, or the most frequent repeat_ngram-gram
    # covering more than repeat_coverage of a response of at least repeat_min_tokens tokens
    "repeat_run": 8,
    "repeat_ngram": 3,
    "repeat_coverage": 0.5,
    "repeat_min_tokens": 12,
    # share of the newest step's answers that must be degenerate
    "degenerate_share": 0.25,
    # skipped updates and NaN/Inf losses are events: they clear after this many clean steps
    "clear_steps": 5,
    # -- new checks (issue 28) -------------------------------------------------------------------------------
    # entropy collapse: the mean actor/entropy of the last entropy_window steps is below entropy_collapse_ratio
    # x its mean over the first entropy_window steps, while the score has not risen by score_rise_min since then
    "entropy_window": 5,
    "entropy_collapse_ratio": 0.2,
    "score_rise_min": 0.05,
    # length hacking (1): Pearson correlation of score with response length within a step, averaged over the
    # last length_corr_window steps with at least length_corr_min_samples answers, above length_corr_max
    "length_corr_max": 0.5,
    "length_corr_window": 3,
    "length_corr_min_samples": 8,
    # length hacking (2): between two validations response_length/mean grew by length_rise_ratio or more while
    # the held-out score did not rise by heldout_rise_min
    "length_rise_ratio": 1.3,
    "heldout_rise_min": 0.01,
    # train/held-out divergence: between two validations the training score (mean of the score_window steps
    # before each) rose by divergence_min_delta or more while the held-out score fell by as much
    "divergence_min_delta": 0.02,
    # garbage answers (replacement characters, control bytes, a token repeated up to the length cap): share of
    # the newest step's answers
    "garbage_share": 0.1,
    # learning signal: share of GRPO groups (>= 2 answers of one prompt) whose scores are all equal, averaged over
    # the last no_signal_window steps
    "no_signal_share": 0.5,
    "no_signal_window": 3,
    # step-one invariants (the first training step): KL to the reference (= the initial actor) at most
    # step1_kl_max; the clip fraction of the first on-policy mini-batch at most step1_clipfrac_max
    "step1_kl_max": 1e-3,
    "step1_clipfrac_max": 0.0,
    # rollout-vs-actor mismatch (actor/rollout_log_probs_absdiff, training/rollout_probs_diff_mean): NeMo-RL
    # calls 1e-3 fine and a rise past 1-2% a broken weight refit; any step above rollout_mismatch_max fires
    "rollout_mismatch_max": 0.02,
    # stalled: no new step for stall_factor x the median step time (at least stall_min_s seconds), once
    # stall_min_steps step times are known
    "stall_factor": 10,
    "stall_min_s": 60,
    "stall_min_steps": 3,
    # stale rollout (rollout_checks.py): a step is bad when the engine flags its rollout stale after the weight sync
    # (rollout/weights_stale > 0) or rollout/weight_fingerprint_gap (the rollout's weights vs the actor's, relative;
    # a correct sync copies them exactly: ~1e-16) exceeds stale_rollout_gap_max; fires after stale_rollout_steps bad
    # steps (1: the first), clears at the first good one
    "stale_rollout_gap_max": 1e-3,
    "stale_rollout_steps": 1,
    # actor not moving (update_checks.py): a step is bad when rollout/actor_weight_change (the actor's move since the
    # previous sync, relative; frozen weights give exactly 0) is at most actor_still_change_max while actor/lr > 0;
    # fires after actor_still_steps bad steps in a row (a LoRA run that trains nothing), clears at the first move
    "actor_still_change_max": 1e-12,
    "actor_still_steps": 3,
    # tool-use collapse (multi-turn): the mean of tool_call_counts/mean over the last tool_window steps falls
    # to tool_collapse_ratio x its best window mean, which was at least tool_min_peak calls per trajectory
    "tool_window": 5,
    "tool_collapse_ratio": 0.1,
    "tool_min_peak": 0.5,
}


def t(name: str) -> float:
    return THRESHOLDS[name]


def n(name: str) -> int:
    return int(THRESHOLDS[name])
