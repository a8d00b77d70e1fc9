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
import zlib


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


def recording_group(worker_cls, init_args):
    """An in-process worker group that also keeps the raw per-mini-batch update metrics (in `.raw`)."""
    from engine.distributed.worker_group import InProcessWorkerGroup

    class RecordingGroup(InProcessWorkerGroup):
        raw: dict = {}

        def dp_call(self, method: str, batch, **kwargs):
            out, metrics = super().dp_call(method, batch, **kwargs)
            if method.startswith("update_"):
                self.raw.update({k: v for k, v in metrics.items() if k.endswith(("pg_loss", "vf_loss", "grad_norm"))})
            return out, metrics

    return RecordingGroup(worker_cls, init_args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.seed_run", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--label", default="")
    p.add_argument("--diagnose", type=int, default=0, metavar="ROWS",
                   help="after the steps, time and profile one forward+backward of ROWS rows on the actor and on "
                        "the critic (operator table, no trace)")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import torch

    from engine.config import build_config, uses_reference
    from engine.main_ppo import pick_device, plan_job, prepare
    from engine.trainer.ppo_trainer import PPOTrainer
    from engine.workers.worker import TrainWorker, free_port

    resolved = build_config(seed_overrides(args.model, args.data, args.steps) + args.overrides)
    cfg, _ = plan_job(resolved, pick_device(resolved))  # the device and local paths set (main_ppo.run's way)
    tokenizer, loader, val_ds, reward_fn, total = prepare(cfg)
    t0 = time.perf_counter()
    group = recording_group(TrainWorker, (cfg, total, cfg.trainer.device))
    info = group.all_call("init", "127.0.0.1", free_port(), uses_reference(cfg))[0]
    trainer = PPOTrainer(cfg, tokenizer, loader, val_ds, reward_fn, reward_fn, group, _Null(), total,
                         device_name=info.get("device_name"), n_params=info.get("n_params"))
    print(json.dumps({"label": args.label, "event": "ready", "seconds": round(time.perf_counter() - t0, 1),
                      "overrides": args.overrides, **info}), flush=True)
    wall = time.perf_counter()
    try:
        for step in range(1, args.steps + 1):
            trainer.global_step = step
            group.raw = {}
            metrics, samples = trainer.train_step(next(loader))
            # beside the phase timers, the wall time between step ends (the data loader's draw included)
            now = time.perf_counter()
            metrics["timing_s/step_wall"], wall = now - wall, now
            record = {"label": args.label, "step": step}
            record.update({k: round(float(v), 3) for k, v in metrics.items() if k.startswith("timing_s/")})
            for k in ("perf/mfu/actor", "actor/pg_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm",
                      "actor/grad_norm_nonfinite", "critic/grad_norm_nonfinite", "response_length/mean",
                      "prompt_length/mean"):
                if k in metrics:
                    record[k] = float(metrics[k])
            if step == 1:  # the same rollouts in two configurations make their updates comparable
                record["first_update"] = group.raw
                text = "\x00".join(str(x.get("response")) for x in samples if x.get("split") == "train")
                record["responses_crc32"] = zlib.crc32(text.encode("utf-8", "replace"))
            if cfg.trainer.device == "cuda":
                record["max_allocated_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
                record["max_reserved_gb"] = round(torch.cuda.max_memory_reserved() / 2**30, 1)
            print(json.dumps(record), flush=True)
        if args.diagnose:
            diagnose(group.workers[0], args.diagnose, cfg, args.label)
    finally:
        group.all_call("shutdown")
    return 0


def diagnose(worker, rows: int, cfg, label: str) -> None:
    """One micro-batch of `rows` ragged rows (prompts up to the limit, full responses): wall and GPU time of
    forward+backward on the actor and on the critic as the update runs them, then the top operators."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine.protocol import Batch
    from engine.workers.forward import response_log_probs, response_values

    prompt, resp = cfg.data.max_prompt_length, cfg.data.max_response_length
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(prompt // 5, prompt // 2, (rows,), generator=g)
    am = torch.zeros(rows, prompt + resp, dtype=torch.long)
    for i, p in enumerate(lens.tolist()):
        am[i, prompt - p:] = 1
    ids = torch.randint(0, 94, am.shape, generator=g) * am
    mb = Batch({"input_ids": ids, "attention_mask": am, "position_ids": (am.cumsum(-1) - 1).clamp(min=0),
                "responses": ids[:, prompt:], "response_mask": am[:, prompt:]}).to(worker.device)
    from engine.workers.forward import trim_padding

    mb = trim_padding(mb)
    remove = cfg.actor_rollout_ref.model.use_remove_padding
    passes = {"actor": lambda: response_log_probs(worker.actor_module, mb, 1.0, remove_padding=remove)[0].sum(),
              "critic": lambda: response_values(worker.critic.module, mb, cfg.critic.model.use_remove_padding).sum()}
    for role, fn in passes.items():
        module = worker.actor_module if role == "actor" else worker.critic.module
        module.train()
        times = []
        for _ in range(4):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            start.record()
            fn().backward()
            end.record()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0, start.elapsed_time(end) / 1e3))
        module.zero_grad(set_to_none=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn().backward()
            torch.cuda.synchronize()
        module.zero_grad(set_to_none=True)
        table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=60)
        print(json.dumps({"label": label, "diagnose": role, "tokens": int(mb["attention_mask"].numel()),
                          "wall_s": [round(a, 4) for a, _ in times[1:]], "gpu_s": [round(b, 4) for _, b in times[1:]]}),
              flush=True)
        print(table, flush=True)


class _Null:
    def __getattr__(self, name):
        return lambda *a, **k: None


if __name__ == "__main__":
    sys.exit(main())
