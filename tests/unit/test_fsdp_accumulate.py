"""`accumulate`: on one worker, gradients accumulate unreduced and layers stay gathered between micro-batches,
and the resulting gradients equal FSDP's usual reduce-after-every-micro-batch ones (bf16 compute, fp32
reduction: the mixed precision a GPU run uses)."""
from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
from torch import nn

from engine.distributed.fsdp import accumulate


@pytest.fixture(scope="module")
def one_rank_group():
    if dist.is_initialized():
        yield
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def sharded_model(seed: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
    mesh = init_device_mesh("cpu", (1,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    return model


def grads(model) -> list[torch.Tensor]:
    return [p.grad.full_tensor().clone() for p in model.parameters()]


def test_one_worker_accumulates_locally_and_matches_per_micro_batch_reduction(one_rank_group):
    torch.manual_seed(0)
    micro = [(torch.randn(8, 16), torch.randn(8, 1)) for _ in range(4)]

    usual = sharded_model(1)
    for x, y in micro:
        ((usual(x).float() - y) ** 2).mean().backward()
        # FSDP's usual path: each backward reduces into the sharded gradient
        assert all(p.grad is not None for p in usual.parameters())

    local = sharded_model(1)
    seen_before_last = []
    for i in accumulate(local, len(micro), world=1):
        x, y = micro[i]
        ((local(x).float() - y) ** 2).mean().backward()
        if i < len(micro) - 1:
            seen_before_last.append(any(p.grad is not None for p in local.parameters()))
    assert seen_before_last == [False, False, False], "nothing may be reduced before the last micro-batch"
    for a, b in zip(grads(usual), grads(local)):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)

    # the settings are restored: a later backward reduces right away again
    ((local(micro[0][0]).float() - micro[0][1]) ** 2).mean().backward()
    assert all(p.grad is not None for p in local.parameters())


def test_several_workers_keep_fsdp_reduction(one_rank_group):
    model = sharded_model(2)
    x, y = torch.randn(4, 16), torch.randn(4, 1)
    for i in accumulate(model, 2, world=2):  # world > 1: every micro-batch reduces as usual
        ((model(x).float() - y) ** 2).mean().backward()
        assert all(p.grad is not None for p in model.parameters())
