"""A worker's checkpoints: saving and loading its trained roles' shards (engine/checkpoint/sharded.py), the
background writes of `checkpoint.async_save` and the Hugging Face export of the actor. Every call is collective:
the driver makes it on every worker at once (WorkerGroup.all_call).
"""
from __future__ import annotations

import contextlib
import os
import time

import torch.distributed as dist

from engine.adapters import lora
from engine.checkpoint.export import hf_class, write_hf_model
from engine.checkpoint.sharded import background_writer, load_role, prepare_staging, save_role
from engine.checkpoint.staging import HostStaging
from engine.distributed.fsdp import full_state_dict


class WorkerCheckpoints:
    """`roles()`: the trained roles now, as (name, role, checkpoint config) with the role's module, optimizer and
    scheduler; `rng()`: a context under which the random state a checkpoint records is the rollout's (the
    behaviour host's, separate_async) — nullcontext elsewhere."""

    def __init__(self, roles, tokenizer, rank: int, world: int, rng=contextlib.nullcontext, saves: bool = True):
        self.roles, self.tokenizer, self.rank, self.world, self.rng = roles, tokenizer, rank, world, rng
        self.saves = saves  # whether this run saves checkpoints at all (trainer.save_freq > 0)
        self.writes: list = []  # background checkpoint writes still running (futures)
        self.groups: dict = {}  # role -> the gloo group of its background writer
        self.writers: dict = {}  # role -> its background writer
        self.staging: dict[str, HostStaging] = {}  # role -> its host staging buffers (kept between saves)

    def prepare(self) -> None:
        """After an update: each async-saved role whose optimizer now has state starts allocating its staging
        buffers in the background, once, so the first save only copies (engine/checkpoint/staging.py). No-op
        otherwise; cheap (the state dict's metadata) and local to this worker (no collective)."""
        if not self.saves:
            return
        for name, role, ckpt_cfg in self.roles():
            if ckpt_cfg.async_save and name not in self.staging:
                staging = HostStaging()
                if prepare_staging(staging, role.module, role.optimizer):
                    self.staging[name] = staging

    def save(self, directory: str) -> None:
        """Start the checkpoint. Roles with checkpoint.async_save return once their state is in host memory and are
        written in the background; `written` / `finish` follow them."""
        self.finish()
        for name, role, ckpt_cfg in self.roles():
            path = os.path.join(directory, name)
            group = self._group(name) if ckpt_cfg.async_save else None
            if group is not None and name not in self.writers:
                self.writers[name] = background_writer(path, self.staging.setdefault(name, HostStaging()))
            writer = self.writers.get(name) if group is not None else None
            with self.rng():
                future = save_role(path, role.module, role.optimizer, role.scheduler, self.rank, self.world,
                                   self.tokenizer, background_group=group, writer=writer)
            if future is not None:
                self.writes.append(future)

    def _group(self, role: str):
        """A gloo group per role for its background writer: two writers (actor, critic) sharing one group would
        interleave their collectives and deadlock. Created on first use, on every rank in the same order
        (save is collective)."""
        if role not in self.groups:
            self.groups[role] = dist.new_group(backend="gloo")
        return self.groups[role]

    def written(self) -> bool:
        """True when no background checkpoint write of this worker is still running (does not wait)."""
        return all(f.done() for f in self.writes)

    def finish(self) -> float:
        """Wait for this worker's background checkpoint writes (re-raising their errors); returns the seconds
        waited. Collective when something was pending on any rank, so every rank calls it together."""
        start = time.perf_counter()
        writes, self.writes = self.writes, []
        for future in writes:
            future.result()
        if writes:
            dist.barrier()
        return time.perf_counter() - start

    def load(self, directory: str) -> None:
        for name, role, _ in self.roles():
            path = os.path.join(directory, name)
            if name == "actor" or os.path.isdir(path):  # the critic where the checkpoint has one
                load_role(path, role.module, role.optimizer, role.scheduler, self.rank, self.world)

    def export_hf(self, module, directory: str) -> None:
        """Write the actor as an ordinary HF model directory (rank 0 writes). A LoRA actor: the merged model
        (W + scale · B A under the plain names, as the rollout gets it) in `directory`, and the adapter in PEFT's
        layout in `directory`/lora_adapter/."""
        if not lora.is_lora(module):
            state = full_state_dict(module)
            if self.rank == 0:
                write_hf_model(hf_class(module), module.config, state, directory, self.tokenizer,
                               module.generation_config)
            dist.barrier()
            return
        merged = {}
        for name, tensor in lora.merged_weights(module):  # gathered one at a time; rank 0 keeps a CPU copy
            if self.rank == 0:
                merged[name] = tensor.detach().cpu().clone()
        adapter = lora.trainable_state(module)
        if self.rank == 0:
            base = lora.base_model(module)
            write_hf_model(hf_class(base), base.config, merged, directory, self.tokenizer, base.generation_config)
            lora.save_adapter(module, adapter, os.path.join(directory, lora.ADAPTER_DIR))
        dist.barrier()
