"""Sharded checkpoints of a trained role with torch.distributed.checkpoint (DCP).

Each rank writes its own shards of model and optimizer state; DCP reshards on load, so a checkpoint
written by 2 workers resumes on 1 or 4. Scheduler and RNG state are small and saved per rank; rank 0 adds the HF config and tokenizer.
"""
from __future__ import annotations

import os
import random

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from engine.adapters import lora
from engine.checkpoint.export import HF_FILES_DIR, save_hf_files
from engine.checkpoint.staging import HostStaging


class StagedWriter(dcp.FileSystemWriter):
    """DCP's file writer whose staging copies into a role's `HostStaging` buffers (allocated ahead of the first
    save, engine/checkpoint/staging.py) instead of DCP's own cache, which it allocates during the first save."""

    def __init__(self, directory: str, staging: HostStaging):
        super().__init__(directory, per_thread_copy_ahead=0)
        self.staging = staging

    def stage(self, state_dict):
        return self.staging.stage(state_dict)


def background_writer(directory: str, staging: HostStaging | None = None) -> StagedWriter:
    """The writer of one role's background saves, kept by the worker from one save to the next. The state is
    staged into host memory before the save returns (`staging`'s buffers: pinned on a GPU, kept between saves, so
    every save copies into the same memory). Its writer thread then reads host memory only:
    `per_thread_copy_ahead=0` keeps that thread off the GPU, because a stream sync from it invalidates any CUDA
    graph the training thread is capturing at that moment (seen on an H100: the static decoder's capture and the
    checkpoint both failed)."""
    return StagedWriter(directory, staging or HostStaging())


def prepare_staging(staging: HostStaging, module, optimizer) -> bool:
    """Start allocating `staging`'s buffers for this role's checkpoint state (background thread). Only once the
    optimizer has state: reading the state dict of an optimizer without any would make DCP initialise it with a
    zero-gradient step, which changes training. Returns whether it started."""
    if not optimizer.state:
        return False
    model_sd, optim_sd = get_state_dict(module, optimizer, options=_options(module))
    staging.prepare({"model": model_sd, "optim": optim_sd})
    return True


def save_role(directory: str, module, optimizer, scheduler, rank: int, world: int, tokenizer=None,
              background_group=None, writer: dcp.FileSystemWriter | None = None):
    """`directory`/huggingface/ gets the config and tokenizer (rank 0): with them the folder alone becomes an HF
    model (`python -m engine.model_merger merge --backend fsdp --local_dir DIR --target_dir D`); a LoRA role's
    `directory`/lora/adapter_config.json adds the adapter's config and the base model's path.

    With `background_group` (a process group of its own, so that the writer thread's collectives never interleave
    with training's) the shards are copied to host memory and written by a background thread: returns the future
    of that write (the caller waits for it before the checkpoint counts); `writer` (see `background_writer`) is
    reused across saves. Otherwise writes before returning."""
    os.makedirs(directory, exist_ok=True)
    if rank == 0:
        save_hf_files(module, tokenizer, os.path.join(directory, HF_FILES_DIR))
        if lora.is_lora(module):  # the DCP shards hold the adapter only: record its config and the base's path
            lora.save_adapter_config(module, os.path.join(directory, lora.CHECKPOINT_DIR))
    extra = {"scheduler": scheduler.state_dict(), "world": world, "rng": rng_state()}
    torch.save(extra, os.path.join(directory, f"extra_state_rank_{rank}.pt"))
    model_sd, optim_sd = get_state_dict(module, optimizer, options=_options(module))
    if background_group is None:
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=directory)
        dist.barrier()
        return None
    result = dcp.async_save({"model": model_sd, "optim": optim_sd}, checkpoint_id=directory,
                            storage_writer=writer or background_writer(directory), process_group=background_group)
    if hasattr(result, "staging_completion"):  # newer torch may stage in the background too: wait for the copy
        result.staging_completion.result()
        return result.upload_completion
    return result


def _options(module) -> StateDictOptions:
    """A role with frozen weights (a LoRA adapter on its base model) saves and loads only what it trains: the base
    is the model path's, unchanged, and the checkpoint stays the adapter's size."""
    frozen = any(not p.requires_grad for p in module.parameters())
    return StateDictOptions(ignore_frozen_params=frozen, strict=not frozen)  # loading: the base keeps its weights


def load_role(directory: str, module, optimizer, scheduler, rank: int, world: int) -> None:
    options = _options(module)
    model_sd, optim_sd = get_state_dict(module, optimizer, options=options)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=directory)
    set_state_dict(module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                   options=options)
    path = os.path.join(directory, f"extra_state_rank_{rank}.pt")
    if not os.path.exists(path):
        path = os.path.join(directory, "extra_state_rank_0.pt")  # fewer ranks saved than load now
    extra = torch.load(path, weights_only=False)
    scheduler.load_state_dict(extra["scheduler"])
    if extra.get("world") == world:  # per-rank RNG streams only make sense for the same layout
        set_rng_state(extra["rng"])


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
