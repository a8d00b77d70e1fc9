"""The overrides device_verl.sh passes verl 0.9.1 (engine/bench/verl_args.py) compose with verl's own Hydra config
(the ppo_trainer.yaml of the verl wheel that scripts/setup.sh installs for the differential tests): every key exists
in verl's schema, or is added with '+' where verl's config leaves a free dict, and the values land where meant."""
from __future__ import annotations

import importlib.util
import os

import pytest

from engine.bench.verl_args import GRPO, merged, seed_command, verl_overrides
from engine.bench.seed_run import seed_overrides

pytest.importorskip("hydra")
if importlib.util.find_spec("verl") is None:
    pytest.skip("verl is not installed (scripts/setup.sh test installs it)", allow_module_level=True)

# what device_verl.sh adds to every verl run, and what its learning part adds
RUN = ["trainer.logger=['console','file']", "trainer.save_freq=10", "trainer.test_freq=10", "trainer.total_epochs=15",
       "trainer.default_local_dir=/tmp/ck", "trainer.rollout_data_dir=/tmp/ro", "trainer.project_name=issue38",
       "trainer.experiment_name=x"]
LEARN = ["trainer.val_before_train=True", "reward.custom_reward_function.path=/r.py",
         "reward.custom_reward_function.name=compute_score",
         "+reward.custom_reward_function.reward_kwargs.format_score=0.1", "data.seed=3",
         "actor_rollout_ref.rollout.seed=3", "trainer.validation_data_dir=/tmp/va"]


def compose(overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    root = importlib.util.find_spec("verl").submodule_search_locations[0]
    with initialize_config_dir(config_dir=os.path.join(root, "trainer", "config"), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def test_seed_command_composes_in_verls_config():
    cfg = compose(verl_overrides("ppo", "/m", "/d", 12, RUN))
    assert cfg.data.train_batch_size == 256 and cfg.data.max_response_length == 256
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 64 and cfg.critic.optim.lr == 1e-5
    assert cfg.algorithm.adv_estimator == "gae" and cfg.actor_rollout_ref.rollout.n == 1
    assert cfg.actor_rollout_ref.rollout.name == "vllm"
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert cfg.critic.model.override_config.attn_implementation == "sdpa"
    # packed rows need flash-attn's varlen kernel: with sdpa verl runs padded
    assert not cfg.actor_rollout_ref.model.use_remove_padding and not cfg.critic.model.use_remove_padding
    assert cfg.trainer.total_training_steps == 12 and list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.trainer.use_v1  # verl's default trainer, as a user gets it


def test_grpo_and_learning_runs_compose():
    cfg = compose(verl_overrides("grpo", "/m", "/d", 12, RUN))
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.actor_rollout_ref.rollout.n == 5
    assert cfg.data.train_batch_size == 128 and cfg.actor_rollout_ref.actor.use_kl_loss
    cfg = compose(verl_overrides("grpo-learn", "/m", "/d", 150, RUN + LEARN))
    assert cfg.data.max_response_length == 512 and cfg.actor_rollout_ref.actor.optim.lr == 2e-6
    assert cfg.reward.custom_reward_function.reward_kwargs.format_score == 0.1 and cfg.data.seed == 3


def test_a_key_verl_lacks_is_refused():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose(seed_command("/m", "/d", 3) + ["actor_rollout_ref.rollout.no_such_key=1"])


def test_the_seed_command_is_rlstudios_with_only_verls_needs_added():
    ours = dict(a.split("=", 1) for a in seed_overrides("/m", "/d", 12))
    theirs = dict(a.lstrip("+").split("=", 1) for a in seed_command("/m", "/d", 12))
    changed = {k for k in ours if ours[k] != theirs.get(k)}
    assert changed == {"actor_rollout_ref.rollout.name"}  # naive -> vllm: verl's v1 trainer has no HF rollout
    assert merged(["a=1", "b=2"], ["+a=3"]) == ["+a=3", "b=2"]
    assert all(k in dict(a.split("=", 1) for a in verl_overrides("grpo", "/m", "/d", 1)) for k in
               (g.split("=", 1)[0] for g in GRPO))
