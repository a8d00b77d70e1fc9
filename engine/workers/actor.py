"""Actor: the policy being trained. Recomputes log-probs of the rollouts and runs the PPO update."""
from __future__ import annotations

from engine.algos.kl import kl_penalty
from engine.algos.losses import agg_loss, get_policy_loss
from engine.protocol import Batch
from engine.workers.forward import MODEL_INPUTS, batched_log_probs, response_log_probs
from engine.workers.update import Metrics, UpdatedModel

UPDATE_INPUTS = MODEL_INPUTS + ("responses", "response_mask", "old_log_probs", "advantages")


class Actor(UpdatedModel):
    prefix = "actor"

    def __init__(self, module, optimizer, scheduler, actor_cfg, *, temperature: float, rollout_n: int, world: int,
                 remove_padding: bool = False, exact: bool = False):
        super().__init__(module, optimizer, scheduler, actor_cfg,
                         mini_batch=actor_cfg.ppo_mini_batch_size * rollout_n // world,  # sequences per worker
                         world=world, remove_padding=remove_padding)
        self.temperature = temperature
        self.exact = exact  # exact mode: batch-invariant log-softmax, and the update checks it (exact_check)

    def compute_log_prob(self, batch: Batch, micro: int, max_tokens: int | None = None):
        self.module.eval()
        return batched_log_probs(self.module, batch, micro, self.temperature, calc_entropy=True,
                                 max_tokens=max_tokens, remove_padding=self.remove_padding, exact=self.exact)

    def update_policy(self, batch: Batch) -> tuple[dict[str, list[float]], Batch]:
        """PPO update. Without `old_log_probs` in the batch the update is on-policy (one epoch, one
        mini-batch): the old log-probs are the current ones, taken from this same forward pass and
        returned (with the entropy) so the driver needs no separate old-log-prob pass."""
        cfg = self.cfg
        on_policy = "old_log_probs" not in batch.tensors
        if on_policy and (cfg.ppo_epochs != 1 or len(batch) > self.mini_batch):
            raise ValueError("on-policy update needs ppo_epochs=1 and one mini-batch; pass old_log_probs instead")
        keys = [k for k in UPDATE_INPUTS if not (on_policy and k == "old_log_probs")]
        keys += ["ref_log_prob"] if cfg.use_kl_loss else []
        keys += ["rollout_is_weights"] if "rollout_is_weights" in batch.tensors else []  # rollout correction
        policy_loss = get_policy_loss(cfg.policy_loss.loss_mode)  # vanilla (PPO) or gspo

        def micro_loss(mb: Batch, norm: int, metrics: Metrics):
            mask = mb["response_mask"].float()
            # exact mode: before the first optimizer step the weights are the rollout's, so this forward must give
            # the old (= the rollout's) log-probs bit for bit; each such micro-batch is checked
            checking = self.exact and metrics.optimizer_steps == 0
            log_prob, entropy = response_log_probs(self.module, mb, self.temperature,
                                                   calc_entropy=cfg.entropy_coeff != 0 or on_policy or checking,
                                                   remove_padding=self.remove_padding, exact=self.exact)
            if checking:
                exact_check(log_prob.detach(), entropy.detach(), mb["old_log_probs"], mb["response_mask"], metrics)
            old_log_prob = log_prob.detach() if on_policy else mb["old_log_probs"]
            pg = policy_loss(old_log_prob, log_prob, mb["advantages"], mask,
                             clip_ratio_low=cfg.clip_ratio_low, clip_ratio_high=cfg.clip_ratio_high,
                             clip_ratio_c=cfg.clip_ratio_c, loss_agg_mode=cfg.loss_agg_mode,
                             norm_length=norm, rollout_is_weights=mb.tensors.get("rollout_is_weights"))
            loss = pg["pg_loss"]
            if cfg.entropy_coeff != 0:
                entropy_loss = agg_loss(entropy, mask, cfg.loss_agg_mode, norm)
                loss = loss - cfg.entropy_coeff * entropy_loss
                metrics.add("actor/entropy_loss", entropy_loss)
            if cfg.use_kl_loss:
                kld = kl_penalty(log_prob, mb["ref_log_prob"], cfg.kl_loss_type)
                kl_loss = agg_loss(kld, mask, cfg.loss_agg_mode, norm)
                loss = loss + cfg.kl_loss_coef * kl_loss
                metrics.add("actor/kl_loss", kl_loss)
                metrics.add("actor/kl_coef", cfg.kl_loss_coef)
            for key in ("pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"):
                metrics.add(f"actor/{key}", pg[key])
            outputs = {"old_log_probs": old_log_prob, "entropys": entropy} if on_policy else None
            return loss, pg["pg_loss"], outputs

        # one mini-batch on-policy: order is irrelevant, keep the rows aligned with the returned log-probs
        return self.run_update(batch.select(keys, meta_keys=()), micro_loss, loss_key="actor/pg_loss",
                               shuffle=cfg.shuffle and not on_policy, seed=int(batch.info.get("global_step", 0)))


def exact_check(log_prob, entropy, old_log_prob, response_mask, metrics: Metrics) -> None:
    """Exact mode: how the update's first forward compares with the rollout's log-probs (the old ones), as sums the
    driver adds up over micro-batches and workers (engine/trainer/rollout_mismatch.exact_metrics)."""
    valid = response_mask.bool()
    actor, rollout = log_prob[valid].double(), old_log_prob[valid].double()
    dp = (actor.exp() - rollout.exp()).abs()
    log_ratio = actor - rollout
    metrics.add("_exact_tokens", valid.sum())
    metrics.add("_exact_mismatched", (log_prob[valid] != old_log_prob[valid]).sum())
    metrics.add("_exact_dp_sum", dp.sum())
    metrics.add("_exact_dp_max", dp.max() if dp.numel() else 0.0)
    metrics.add("_exact_dlogp_sum", log_ratio.abs().sum())
    metrics.add("_exact_k3_sum", (log_ratio.exp() - log_ratio - 1).sum())
    metrics.add("_entropy_sum", (entropy * response_mask).sum())
    metrics.add("_entropy_count", response_mask.sum())
