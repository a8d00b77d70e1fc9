"""Loading HF models and sharding them with FSDP2 (`fully_shard`) over the data-parallel workers.

Each decoder layer is its own FSDP unit, then the root; parameters stay sharded between calls and are
all-gathered per layer during forward/backward (one worker: the root is the only unit). `unsharded()` gathers them once for generation so the
rollout reuses the actor's weights in place (no copy, no collectives per decoded token).
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated transformer blocks (the FSDP wrap units)."""
    no_split = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in no_split]
    if layers:
        return layers
    for m in model.modules():  # fallback: the first ModuleList of blocks
        if isinstance(m, nn.ModuleList) and len(m) > 0:
            return list(m)
    return []


# One worker has nothing to shard over: the whole model is gathered at once anyway, so a single FSDP unit (the
# root) spares the per-layer hooks that otherwise run four times per layer and micro-batch on the CPU while the
# GPU waits. "layers" keeps one unit per decoder layer as with several workers.
ONE_WORKER_UNITS = "root"


def shard_model(model: nn.Module, mesh, *, param_dtype=None, reduce_dtype=torch.float32,
                reshard_after_forward: bool = True, cpu_offload: bool = False) -> nn.Module:
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype) if param_dtype else \
        MixedPrecisionPolicy()
    offload = CPUOffloadPolicy() if cpu_offload else OffloadPolicy()
    kwargs = dict(mesh=mesh, mp_policy=mp, offload_policy=offload)
    # with CPU offload, per-layer units bound how much is on the GPU at a time: keep them
    layer_units = mesh.size() > 1 or cpu_offload or ONE_WORKER_UNITS == "layers"
    for layer in decoder_layers(model) if layer_units else []:
        fully_shard(layer, reshard_after_forward=reshard_after_forward, **kwargs)
        layer._rl_reshard_after_forward = reshard_after_forward
    fully_shard(model, reshard_after_forward=reshard_after_forward, **kwargs)
    model._rl_reshard_after_forward = reshard_after_forward
    return model


def fsdp_modules(model: nn.Module):
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def unsharded(model: nn.Module):
    """Keep all parameters gathered for the duration (generation): one all-gather, not one per token."""
    mods = fsdp_modules(model)
    for m in mods:
        m.set_reshard_after_forward(False, recurse=False)
    for m in mods:
        m.unshard()
    try:
        yield model
    finally:
        for m in mods:
            m.reshard()
            m.set_reshard_after_forward(getattr(m, "_rl_reshard_after_forward", True), recurse=False)


# One worker's gradient accumulation: "nosync" (no reduction and no re-gather until the last micro-batch),
# "gathered" (layers stay gathered; FSDP reduces after every micro-batch), "off" (FSDP's usual path).
LOCAL_ACCUMULATION = "nosync"


def accumulate(model: nn.Module, n_micro: int, world: int):
    """Indices of the micro-batches of one optimizer step. On a single worker the layers stay gathered and the
    gradients accumulate unreduced (in the reduce dtype, fp32) until the last micro-batch: with one rank, the
    all-gather before each forward and the reduce-scatter after each backward are copies that only cost time.
    With several workers FSDP reduces after every micro-batch as usual (keeping whole gradients and gathered
    layers on each GPU would cost memory the sharding exists to save)."""
    from torch.distributed.fsdp import FSDPModule

    local = world == 1 and isinstance(model, FSDPModule) and LOCAL_ACCUMULATION != "off"
    try:
        for i in range(n_micro):
            if local:
                last = i == n_micro - 1
                model.set_requires_gradient_sync(last or LOCAL_ACCUMULATION == "gathered")
                model.set_reshard_after_backward(last)  # the last backward reshards: the step updates shards
            yield i
    finally:
        if local:
            model.set_requires_gradient_sync(True)
            model.set_reshard_after_backward(True)


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Full (unsharded) CPU state dict; collective: every rank must call it. Rank 0 gets the tensors."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def clip_grad_norm(model: nn.Module, max_norm: float) -> torch.Tensor:
    params = [p for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return norm


def to_floats(metrics: dict[str, list]) -> dict[str, list[float]]:
    """Metric lists holding device tensors (kept so the update loop never waits on the GPU) → floats, with
    one synchronisation for all of them."""
    tensors = [v for values in metrics.values() for v in values if isinstance(v, torch.Tensor)]
    if not tensors:
        return {k: [float(v) for v in values] for k, values in metrics.items()}
    device = tensors[0].device
    flat = iter(torch.stack([t.float().reshape(()).to(device) for t in tensors]).tolist())
    return {k: [next(flat) if isinstance(v, torch.Tensor) else float(v) for v in values] for k, values in metrics.items()}
