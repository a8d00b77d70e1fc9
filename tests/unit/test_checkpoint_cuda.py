"""Background checkpoint writes on CUDA (skipped elsewhere). The writer thread must stay off the GPU: a stream
sync from it invalidates a CUDA graph that the training thread captures meanwhile (the static decoder captures
one every generation), which on an H100 failed both the capture and the checkpoint. Here the main thread
captures graphs in the strict ("global") mode for as long as a write is in flight; then the checkpoint loads
back exactly, for a first save and for a second one that reuses the writer's staging buffers. And the staging
buffers allocated ahead (engine/checkpoint/staging.py: pinned host memory, in a thread of their own) leave a
thread-local capture (the static decoder's mode) alone, and the first save then allocates nothing."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from transformers import Qwen2Config, Qwen2ForCausalLM

from engine.checkpoint.sharded import background_writer, load_role, prepare_staging, save_role
from engine.checkpoint.staging import HostStaging
from engine.distributed.fsdp import shard_model
from engine.workers.worker import free_port

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
DEVICE = "cuda"


@pytest.fixture()
def one_rank():
    dist.init_process_group("cpu:gloo,cuda:nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def build(seed: int):
    torch.manual_seed(seed)
    cfg = Qwen2Config(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
                      num_key_value_heads=2, vocab_size=32000, max_position_embeddings=256)
    model = shard_model(Qwen2ForCausalLM(cfg).to(DEVICE), init_device_mesh(DEVICE, (1,)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    return model, opt, sched


def train_step(model, opt, sched):
    ids = torch.randint(0, 32000, (2, 64), device=DEVICE)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad()
    sched.step()


def local_state(model, opt) -> dict[str, torch.Tensor]:
    out = {f"p.{k}": v.to_local().float().cpu().clone() for k, v in model.state_dict().items()}
    for i, st in enumerate(opt.state.values()):
        out.update({f"o{i}.{k}": (v.to_local() if hasattr(v, "to_local") else v).float().cpu().clone()
                    for k, v in st.items()})
    return out


def capture_while(future, mode: str = "global") -> int:
    """CUDA graphs captured while `future` runs (anything with done()); the count proves the capture overlapped it.
    "global": any thread's unsafe call fails the capture; "thread_local": only this thread's (the decoder's mode)."""
    x = torch.randn(256, 256, device="cuda")
    captured = 0
    while not future.done():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            (x @ x).relu_()  # warm-up on a side stream, as before any capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode=mode):
            (x @ x).relu_()
        graph.replay()
        captured += 1
    return captured


def test_background_write_leaves_graph_capture_alone_and_resumes_exactly(one_rank, tmp_path):
    model, opt, sched = build(0)
    group = dist.new_group(backend="gloo")
    writer = background_writer(str(tmp_path / "s1"))
    saved = {}
    overlapped = []
    for name in ("s1", "s2"):  # the second save copies into the staging buffers the first one allocated
        train_step(model, opt, sched)
        saved[name] = local_state(model, opt)
        future = save_role(str(tmp_path / name), model, opt, sched, 0, 1, background_group=group, writer=writer)
        overlapped.append(capture_while(future))
        future.result()
    assert all(n > 0 for n in overlapped), f"no capture overlapped a write ({overlapped}): nothing was tested"
    assert not torch.equal(saved["s1"]["p.lm_head.weight"], saved["s2"]["p.lm_head.weight"])
    for name in ("s1", "s2"):
        fresh, fopt, fsched = build(1)
        train_step(fresh, fopt, fsched)  # the optimizer's state exists before it is loaded into
        load_role(str(tmp_path / name), fresh, fopt, fsched, 0, 1)
        got = local_state(fresh, fopt)
        assert got.keys() == saved[name].keys()
        for key, want in saved[name].items():
            assert torch.equal(got[key], want), f"{name}: {key} differs after loading"


class _Allocating:
    def __init__(self, staging):
        self.staging = staging

    def done(self) -> bool:
        return self.staging.ready()


def test_staging_allocated_ahead_leaves_a_thread_local_capture_alone_and_the_first_save_copies(one_rank, tmp_path):
    model, opt, sched = build(0)
    train_step(model, opt, sched)
    staging = HostStaging()
    assert prepare_staging(staging, model, opt)
    overlapped = capture_while(_Allocating(staging), mode="thread_local")
    staging.wait()
    assert overlapped > 0, "no capture overlapped the allocation: nothing was tested"
    assert staging.pin and staging.allocations == 1
    assert all(b.is_pinned() for b in staging.buffers.values() if b.numel())
    group = dist.new_group(backend="gloo")
    train_step(model, opt, sched)
    want = local_state(model, opt)
    future = save_role(str(tmp_path / "s"), model, opt, sched, 0, 1, background_group=group,
                       writer=background_writer(str(tmp_path / "s"), staging))
    future.result()
    assert staging.allocations == 1  # the save copied into the prepared buffers
    fresh, fopt, fsched = build(1)
    train_step(fresh, fopt, fsched)
    load_role(str(tmp_path / "s"), fresh, fopt, fsched, 0, 1)
    got = local_state(fresh, fopt)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
