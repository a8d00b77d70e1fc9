"""The seed's command (README "The seed's command"), in-process: one TrainWorker, no Ray, the real config,
data, PPOTrainer.train_step and timers, for a few steps. Prints one JSON line per step: the phase timings,
memory, and the first update's losses and grad norms per mini-batch (to compare configurations).

    python -m engine.bench.seed_run --model DIR --data DIR [--steps 3] [--label NAME] [key=value ...]

DIR for --data holds train.parquet / test.parquet from `python -m engine.data.gsm8k`. key=value arguments
are ordinary engine overrides on top of the seed's command (e.g. to reproduce older defaults).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def seed_overrides(model: str, data: str, steps: int) -> list[str]:
    """The README's seed command (paths swapped in), without validation and checkpoints."""
    return [f"data.train_files={data}/train.parquet", f"data.val_files={data}/test.parquet",
            "data.train_batch_size=256", "data.max_prompt_length=512", "data.max_response_length=256",
            "data.filter_overlong_prompts=True", f"actor_rollout_ref.model.path={model}",
            "actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.actor.ppo_mini_batch_size=64",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "actor_rollout_ref.rollout.name=naive",
            "critic.optim.lr=1e-5", f"critic.model.path={model}", "critic.ppo_micro_batch_size_per_gpu=4",
            "algorithm.kl_ctrl.kl_coef=0.001", "trainer.logger=[]", "trainer.val_before_train=False",
            "trainer.n_gpus_per_node=1", "trainer.nnodes=1", "trainer.save_freq=-1", "trainer.test_freq=-1",
            f"trainer.total_training_steps={steps}"]


class LocalGroup:
    """WorkerGroup's interface over one in-process worker; keeps the raw per-mini-batch update metrics."""

    def __init__(self, worker):
        self.worker, self.world, self.raw = worker, 1, {}

    def all_call(self, method: str, *args, **kwargs):
        return [getattr(self.worker, method)(*args, **kwargs)]

    def rank0_call(self, method: str, *args, **kwargs):
        return getattr(self.worker, method)(*args, **kwargs)

    def dp_call(self, method: str, batch, **kwargs):
        out, m = getattr(self.worker, method)(batch, **kwargs)
        metrics = {k: v if isinstance(v, list) else [v] for k, v in (m or {}).items()}
        if method.startswith("update_"):
            self.raw.update({k: v for k, v in metrics.items() if k.endswith(("pg_loss", "vf_loss", "grad_norm"))})
        return out, metrics


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.seed_run", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--label", default="")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import torch

    from engine.config import build_config
    from engine.main_ppo import pick_device, prepare
    from engine.trainer.ppo_trainer import PPOTrainer
    from engine.workers.worker import TrainWorker, free_port

    cfg = build_config(seed_overrides(args.model, args.data, args.steps) + args.overrides)
    cfg.trainer.device = pick_device(cfg)
    tokenizer, loader, val_ds, reward_fn, total = prepare(cfg)
    t0 = time.perf_counter()
    worker = TrainWorker(0, 1, cfg, total, cfg.trainer.device)
    uses_ref = bool(cfg.algorithm.use_kl_in_reward or cfg.actor_rollout_ref.actor.use_kl_loss)
    info = worker.init("127.0.0.1", free_port(), uses_ref)
    group = LocalGroup(worker)
    trainer = PPOTrainer(cfg, tokenizer, loader, val_ds, reward_fn, reward_fn, group, _Null(), total,
                         device_name=info.get("device_name"), n_params=info.get("n_params"))
    print(json.dumps({"label": args.label, "event": "ready", "seconds": round(time.perf_counter() - t0, 1),
                      "overrides": args.overrides, **info}), flush=True)
    try:
        for step in range(1, args.steps + 1):
            trainer.global_step = step
            group.raw = {}
            metrics, _ = trainer.train_step(next(loader))
            record = {"label": args.label, "step": step}
            record.update({k: round(float(v), 3) for k, v in metrics.items() if k.startswith("timing_s/")})
            for k in ("perf/mfu/actor", "actor/pg_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm",
                      "actor/grad_norm_nonfinite", "critic/grad_norm_nonfinite", "response_length/mean",
                      "prompt_length/mean"):
                if k in metrics:
                    record[k] = float(metrics[k])
            if step == 1:
                record["first_update"] = group.raw
            if cfg.trainer.device == "cuda":
                record["max_allocated_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
                record["max_reserved_gb"] = round(torch.cuda.max_memory_reserved() / 2**30, 1)
            print(json.dumps(record), flush=True)
    finally:
        worker.shutdown()
    return 0


class _Null:
    def __getattr__(self, name):
        return lambda *a, **k: None


if __name__ == "__main__":
    sys.exit(main())
