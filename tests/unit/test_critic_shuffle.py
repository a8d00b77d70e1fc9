"""critic.shuffle works (it used to be accepted and ignored): with several mini-batches it changes which rows
share a mini-batch, so the weights after the update differ; the order is seeded by the step, so it repeats."""
import copy

import torch

from engine.config import build_config
from engine.workers.critic import Critic
from engine.workers.optim import build_optimizer, build_scheduler
from tests.unit.test_auto_micro import update_batch
from tests.unit.test_packing import load_critic


def updated_weights(tiny_dir, value_model, shuffle: bool) -> torch.Tensor:
    cfg = build_config([f"actor_rollout_ref.model.path={tiny_dir}", "data.train_batch_size=5",
                        "actor_rollout_ref.actor.ppo_mini_batch_size=1", "critic.ppo_micro_batch_size_per_gpu=1",
                        f"critic.shuffle={shuffle}", "trainer.device=cpu"]).critic
    model = copy.deepcopy(value_model)
    opt = build_optimizer(model.parameters(), cfg.optim, "cpu")
    critic = Critic(model, opt, build_scheduler(opt, cfg.optim, 10), cfg, rollout_n=1, world=1)
    batch = update_batch()
    batch.info["global_step"] = 3
    critic.update_critic(batch)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_critic_shuffle_changes_the_mini_batches_and_repeats(tiny_dir):
    value_model = load_critic(tiny_dir)
    in_order = updated_weights(tiny_dir, value_model, shuffle=False)
    shuffled = updated_weights(tiny_dir, value_model, shuffle=True)
    assert not torch.allclose(in_order, shuffled)  # 5 one-row mini-batches in another order: other weights
    torch.testing.assert_close(updated_weights(tiny_dir, value_model, shuffle=True), shuffled)
