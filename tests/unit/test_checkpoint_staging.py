"""A role's checkpoint staging buffers allocated ahead (engine/checkpoint/staging.py), on CPU over gloo with FSDP2:
nothing is prepared (and the optimizer is left alone) before its first step; once prepared, the first save
allocates nothing and the checkpoint written in the background, while training goes on, loads back exactly, model,
optimizer and scheduler, for a first and a second save; a state whose shapes changed is staged whole anyway."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from transformers import Qwen2Config, Qwen2ForCausalLM

from engine.checkpoint.sharded import background_writer, load_role, prepare_staging, save_role
from engine.checkpoint.staging import HostStaging, leaf_specs
from engine.distributed.fsdp import shard_model
from engine.workers.worker import free_port

VOCAB = 96


@pytest.fixture()
def one_rank():
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield dist.new_group(backend="gloo")  # the background writer's own group, as the worker makes it
    dist.destroy_process_group()


def build(seed: int, hidden: int = 32):
    torch.manual_seed(seed)
    cfg = Qwen2Config(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64)
    model = shard_model(Qwen2ForCausalLM(cfg), init_device_mesh("cpu", (1,)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
    return model, opt, sched


def train_step(model, opt, sched):
    ids = torch.randint(0, VOCAB, (2, 12))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad()
    sched.step()


def snapshot(model, opt, sched) -> dict:
    out = {f"p.{k}": v.to_local().clone() for k, v in model.state_dict().items()}
    for i, st in enumerate(opt.state.values()):
        out |= {f"o{i}.{k}": (v.to_local() if hasattr(v, "to_local") else v).clone() for k, v in st.items()}
    out["lr"] = torch.tensor(sched.get_last_lr())
    return out


def loaded(path, hidden: int = 32) -> dict:
    fresh = build(1, hidden)
    train_step(*fresh)  # the optimizer's state exists before it is loaded into
    load_role(str(path), fresh[0], fresh[1], fresh[2], 0, 1)
    return snapshot(*fresh)


def assert_same(got: dict, want: dict, what: str):
    assert got.keys() == want.keys(), what
    for key, value in want.items():
        assert torch.equal(got[key], value), f"{what}: {key} differs after loading"


def test_nothing_is_prepared_before_the_optimizer_has_state(one_rank):
    model, opt, _ = build(0)
    staging = HostStaging()
    # reading the state dict now would make DCP initialise AdamW with a zero-gradient step (its step count 1)
    assert prepare_staging(staging, model, opt) is False
    assert len(opt.state) == 0 and staging.allocations == 0 and staging.specs is None


def test_prepared_buffers_make_the_first_save_copy_only_and_resume_exactly(one_rank, tmp_path):
    model, opt, sched = build(0)
    train_step(model, opt, sched)
    staging = HostStaging()
    assert prepare_staging(staging, model, opt) is True
    staging.wait()
    assert staging.allocations == 1 and staging.prepare_s is not None and not staging.pin  # plain memory on CPU
    # model weights + AdamW's step, exp_avg and exp_avg_sq per parameter: the buffers cover the whole state
    n_params = len(model.state_dict())
    assert len(staging.buffers) == n_params + 3 * n_params
    writer = background_writer(str(tmp_path / "s1"), staging)
    for name in ("s1", "s2"):
        train_step(model, opt, sched)
        want = snapshot(model, opt, sched)
        future = save_role(str(tmp_path / name), model, opt, sched, 0, 1, background_group=one_rank, writer=writer)
        train_step(model, opt, sched)  # training goes on: the write reads the staged copy, not the live state
        future.result()
        assert staging.allocations == 1, f"{name}: the save allocated its buffers instead of using the prepared ones"
        assert_same(loaded(tmp_path / name), want, name)
    assert not torch.equal(loaded(tmp_path / "s1")["p.lm_head.weight"], loaded(tmp_path / "s2")["p.lm_head.weight"])


def test_a_state_of_other_shapes_is_staged_whole(one_rank, tmp_path):
    small = build(0, hidden=16)
    train_step(*small)
    staging = HostStaging()
    prepare_staging(staging, small[0], small[1])
    staging.wait()
    prepared = dict(staging.specs)
    model, opt, sched = build(0, hidden=32)  # e.g. a role whose state changed since the buffers were prepared
    train_step(model, opt, sched)
    want = snapshot(model, opt, sched)
    future = save_role(str(tmp_path / "c"), model, opt, sched, 0, 1, background_group=one_rank,
                       writer=background_writer(str(tmp_path / "c"), staging))
    future.result()
    assert staging.allocations == 2 and staging.specs != prepared
    assert_same(loaded(tmp_path / "c", hidden=32), want, "restaged")


def test_leaf_specs_are_the_local_shards_shapes(one_rank):
    model, _, _ = build(0)
    specs = leaf_specs({"model": model.state_dict(), "x": [torch.zeros(2, 3, dtype=torch.bfloat16), 1.0]})
    assert specs[("x", 0)] == ((2, 3), torch.bfloat16) and ("x", 1) not in specs
    assert specs[("model", "lm_head.weight")] == ((VOCAB, 32), torch.float32)
