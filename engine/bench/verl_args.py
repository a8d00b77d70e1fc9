"""The seed's command for verl 0.9.1 itself (issue 38): the same keys that `seed_run.seed_overrides` gives rlstudio,
plus only what verl needs to start on the device image, each said below. One copy, used by `device_verl.sh` on the
GPU and by `tests/unit/test_verl_args.py` (verl's own Hydra config composes them on the CPU where verl is installed).

    python -m engine.bench.verl_args ppo|grpo|grpo-learn MODEL DATA STEPS [key=value ...]   # one override a line
"""
from __future__ import annotations

import sys

from engine.bench.seed_run import seed_overrides

# What verl needs beyond the README's seed command, none of it a change of the algorithm:
# - verl has no `naive`/`hf` rollout on its default (v1) trainer: its fast path, vLLM, is the one compared;
# - verl's validate_config refuses a run without the log-prob micro-batch sizes (rlstudio plans them itself):
#   verl's own quick start values;
# - flash-attn has no wheel for the image's torch 2.11/CUDA 13 on PyPI (only an sdist that builds for an hour against
#   the CUDA toolkit): the models use PyTorch's sdpa, and so verl's packed (remove-padding) path is off: verl packs
#   the micro-batch into one row with attention_mask=None for flash-attn's varlen kernel, and with sdpa the second
#   sequence then attends to the first (seen on the CPU here with transformers 5.9 and a tiny Qwen2: packed logits
#   of the second sequence differ from its own by 0.71, as much as with no packing at all; the first agrees to 2e-7).
VERL_NEEDS = [
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "+critic.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.model.use_remove_padding=False",
    "critic.model.use_remove_padding=False",
]

# verl's GRPO example (examples/grpo_trainer/run_qwen2-7b.sh keys), n = 5, KL as a loss; the same keys that
# device_real_model.sh passes rlstudio, so both systems run one command
GRPO = [
    "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=5", "data.train_batch_size=128",
    "actor_rollout_ref.actor.ppo_mini_batch_size=32", "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001", "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff=0", "algorithm.use_kl_in_reward=False",
]


def seed_command(model: str, data: str, steps: int) -> list[str]:
    """The README's seed command (seed_run.seed_overrides), `rollout.name=naive` replaced by verl's needs."""
    base = [a for a in seed_overrides(model, data, steps) if not a.startswith("actor_rollout_ref.rollout.name=")]
    return base + VERL_NEEDS


def merged(*groups: list[str]) -> list[str]:
    """key=value lists joined, a later value of a key replacing the earlier one in place (Hydra refuses a key given
    twice on one command line)."""
    out: dict[str, str] = {}
    for group in groups:
        for arg in group:
            key = arg.split("=", 1)[0].lstrip("+")
            out[key] = arg
    return list(out.values())


def verl_overrides(kind: str, model: str, data: str, steps: int, extra: list[str] | None = None) -> list[str]:
    """ppo: the seed command (GAE + critic, n = 1); grpo: with verl's GRPO example keys (n = 5);
    grpo-learn: GRPO for the learning curves, the same keys device_real_model.sh gives rlstudio. `extra`
    (key=value) replaces or adds keys."""
    args = seed_command(model, data, steps)
    if kind == "ppo":
        groups = [args]
    elif kind == "grpo":
        groups = [args, GRPO]
    elif kind == "grpo-learn":
        groups = [args, GRPO, ["data.max_response_length=512", "actor_rollout_ref.actor.optim.lr=2e-6"]]
    else:
        raise ValueError(f"kind must be ppo, grpo or grpo-learn, not {kind!r}")
    return merged(*groups, extra or [])


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print("usage: python -m engine.bench.verl_args ppo|grpo|grpo-learn MODEL DATA STEPS [key=value ...]",
              file=sys.stderr)
        return 2
    kind, model, data, steps, *extra = argv
    print("\n".join(verl_overrides(kind, model, data, int(steps), extra)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
