"""What a worker's memory holds, as the perf/*_gb metrics the trainer logs at the first and the last step."""
from __future__ import annotations

import resource

import torch


def memory_stats(device_type: str, roles) -> dict:
    """The peak memory of this worker (the GPU's allocator, or the process's resident set on the CPU) and the state
    sizes of its trained `roles` ((name, role or None) pairs)."""
    stats = state_sizes(roles)
    if device_type == "cuda":
        return {**stats, "perf/max_memory_allocated_gb": torch.cuda.max_memory_allocated() / 2**30,
                "perf/max_memory_reserved_gb": torch.cuda.max_memory_reserved() / 2**30}
    return {**stats, "perf/cpu_max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def state_sizes(roles) -> dict:
    """This rank's parameter and AdamW-state bytes per trained role (LoRA: what the adapter saves)."""
    out = {}
    for name, role in roles:
        if role is None:
            continue
        states = [v for st in role.optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
        out[f"perf/{name}_optimizer_state_gb"] = sum(_local_bytes(v) for v in states) / 2**30
        trained = [p for group in role.optimizer.param_groups for p in group["params"]]
        out[f"perf/{name}_trained_param_gb"] = sum(_local_bytes(p) for p in trained) / 2**30
    return out


def _local_bytes(t) -> int:
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()
