"""How long a checkpoint blocks training, the first save and the later ones (issue 40: first save ≤ 5 s).

    python -m engine.bench.checkpoint_save [--workload w1] [--roles 2] [--saves 3] [--out FILE]

The real save path of a worker (engine/checkpoint/sharded.py: FSDP2, DCP's background write, `async_save`) on the
workload's random-init model, one rank: `--roles` trained roles (2 = the seed's actor + critic, fp32 weights and
AdamW state: ~12 GB for the 0.5B model), one optimizer step each before every save. Two variants, each in a fresh
process so that neither inherits the other's pinned memory:
  at_save   the staging buffers allocated by the first save (what runs did before)
  prepared  allocated ahead in a background thread after the first update (`WorkerCheckpoints.prepare`, now)
One JSON line per variant: the blocking seconds of every save (`first_blocking_s`, `later_blocking_s` = median of
the others), the background write's seconds, the staged state's size, and for `prepared` the allocation's seconds
in its thread and the part on the training thread (reading the state dict's shapes).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = ("at_save", "prepared")


def run_variant(workload: str, variant: str, roles: int, saves: int, device: str, root: str) -> dict:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM

    from engine.bench.workloads import WORKLOADS, model_dir, sync
    from engine.checkpoint.sharded import background_writer, prepare_staging, save_role
    from engine.checkpoint.staging import HostStaging
    from engine.distributed.fsdp import shard_model
    from engine.workers.worker import free_port

    backend = "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    mesh = init_device_mesh(device, (1,))
    path = model_dir(WORKLOADS[workload])
    trained = []
    for _ in range(roles):  # fp32 master weights, bf16 compute on a GPU: the actor's and critic's layout
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
        model = shard_model(model, mesh, param_dtype=torch.bfloat16 if device == "cuda" else None)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
        trained.append((model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)))
    vocab = trained[0][0].config.vocab_size

    def train_step():
        for model, opt, sched in trained:
            ids = torch.randint(0, vocab, (2, 128), device=device)
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
        sync(device)

    train_step()  # the optimizer's state exists from the first update on
    stagings = [HostStaging() for _ in trained]
    out = {"phase": "checkpoint_save", "variant": variant, "workload": workload, "roles": roles, "device": device}
    if device == "cuda":
        out["device_name"] = torch.cuda.get_device_name()
    if variant == "prepared":
        t0 = time.perf_counter()
        for staging, (model, opt, _) in zip(stagings, trained):
            prepare_staging(staging, model, opt)
        out["prepare_training_thread_s"] = round(time.perf_counter() - t0, 4)
        for staging in stagings:  # in a run the first save comes steps later; here wait, and time the thread
            staging.wait()
        out["prepare_background_s"] = round(max(s.prepare_s for s in stagings), 3)
    groups = [dist.new_group(backend="gloo") for _ in trained]  # one per role, as WorkerCheckpoints makes them
    writers = [background_writer(os.path.join(root, "0", str(i)), s) for i, s in enumerate(stagings)]
    blocking, writing = [], []
    for n in range(saves):
        train_step()
        t0 = time.perf_counter()
        futures = [save_role(os.path.join(root, str(n), str(i)), model, opt, sched, 0, 1, background_group=g,
                             writer=w) for i, ((model, opt, sched), g, w) in enumerate(zip(trained, groups, writers))]
        blocking.append(time.perf_counter() - t0)
        for f in futures:
            f.result()
        writing.append(time.perf_counter() - t0)
        shutil.rmtree(os.path.join(root, str(n)), ignore_errors=True)  # 12 GB a save: keep the disk free
    out |= {"first_blocking_s": round(blocking[0], 3),
            "later_blocking_s": round(statistics.median(blocking[1:]), 3) if saves > 1 else None,
            "runs": [round(b, 3) for b in blocking], "write_s": [round(w, 3) for w in writing],
            "allocations": [s.allocations for s in stagings], "pinned": stagings[0].pin,
            "state_gb": round(sum(b.numel() * b.element_size() for s in stagings for b in s.buffers.values())
                              / 2**30, 3)}
    dist.destroy_process_group()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.checkpoint_save", description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="w1", help="whose model: w1 (Qwen2.5-0.5B shapes) or tiny (CPU)")
    p.add_argument("--roles", type=int, default=2, help="trained roles saved together (2: actor + critic)")
    p.add_argument("--saves", type=int, default=3)
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--variant", default=None, help=argparse.SUPPRESS)  # one variant, in this process
    p.add_argument("--out", default=None, help="also append the JSON lines to this file")
    args = p.parse_args(argv)
    import torch

    from engine.bench.workloads import WORKLOADS

    if args.workload not in WORKLOADS:
        p.error(f"--workload {args.workload}: unknown; known: {', '.join(WORKLOADS)}")
    if args.saves < 1 or args.roles < 1:
        p.error("--saves and --roles must be at least 1")
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if args.variant:
        root = tempfile.mkdtemp(prefix="ckpt-bench-")
        try:
            print(json.dumps(run_variant(args.workload, args.variant, args.roles, args.saves, device, root)), flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return 0
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            p.error(f"--variants: unknown {variant!r}; known: {', '.join(VARIANTS)}")
        done = subprocess.run([sys.executable, "-m", "engine.bench.checkpoint_save", "--variant", variant,
                               "--workload", args.workload, "--roles", str(args.roles), "--saves", str(args.saves),
                               "--device", device], capture_output=True, text=True, check=False)
        if done.returncode:
            print(f"[checkpoint_save] {variant} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
            return done.returncode
        line = next(x for x in done.stdout.splitlines() if x.startswith('{"phase"'))
        print(line, flush=True)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
