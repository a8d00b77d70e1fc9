"""verl's own GSM8K rule with a format score, as `reward.custom_reward_function` for verl's learning runs (issue 38,
section 3): the reward device_real_model.sh gives rlstudio (`custom_reward_function.reward_kwargs.format_score=0.1`,
the base model's strict score being 0 of 96). Returns the strict accuracy beside the shaped score, so verl's
validation logs `acc` as rlstudio's does. Runs inside verl's environment (imports verl)."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, format_score=0.1, **_):
    from verl.utils.reward_score import gsm8k

    shaped = gsm8k.compute_score(solution_str, ground_truth, format_score=float(format_score))
    strict = gsm8k.compute_score(solution_str, ground_truth, format_score=0.0)
    return {"score": float(shaped), "acc": float(strict)}
