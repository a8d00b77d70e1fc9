"""`trainer.profile_steps=[N,...]`: the worker phases of those steps run under torch.profiler.

Each phase of a profiled step writes, per rank, into `<profile_dir>/step_<N>/`:
  <phase>_rank<r>.txt       operators and kernels sorted by device time (CPU time on a CPU run)
  <phase>_rank<r>.json.gz   the trace, for chrome://tracing or https://ui.perfetto.dev
"""
from __future__ import annotations

import contextlib
import gzip
import os
import shutil

import torch

TABLE_ROWS = 60


def profile_root(trainer_cfg) -> str | None:
    """The absolute profile folder, or None when no step is profiled (resolved on the driver: workers may run
    in another working directory)."""
    if not trainer_cfg.profile_steps:
        return None
    root = trainer_cfg.profile_dir or os.path.join(trainer_cfg.default_local_dir or ".", "profile")
    return os.path.abspath(os.path.expanduser(root))


@contextlib.contextmanager
def maybe_profile(trainer_cfg, step, phase: str, rank: int, device_type: str):
    """Profile the enclosed phase when `step` is one of `trainer.profile_steps`; otherwise do nothing."""
    if step is None or int(step) not in set(trainer_cfg.profile_steps or ()):
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    folder = os.path.join(profile_root(trainer_cfg), f"step_{int(step)}")
    os.makedirs(folder, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    with profile(activities=activities, record_shapes=False) as prof:
        yield
        if device_type == "cuda":
            torch.cuda.synchronize()  # the phase's kernels belong in its profile
    sort = "self_cuda_time_total" if device_type == "cuda" else "self_cpu_time_total"
    base = os.path.join(folder, f"{phase}_rank{rank}")
    with open(base + ".txt", "w", encoding="utf-8") as f:
        f.write(prof.key_averages().table(sort_by=sort, row_limit=TABLE_ROWS, max_name_column_width=90))
    trace = base + ".json"
    prof.export_chrome_trace(trace)
    with open(trace, "rb") as src, gzip.open(trace + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(trace)
