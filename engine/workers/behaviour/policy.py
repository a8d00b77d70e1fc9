"""The behaviour policy of the async modes, on the worker: a second copy of the actor that the rollout generates with
while the actor trains (the colocated rollout samples with the actor's own weights, which the update is changing).
The copy is a plain module holding the full weights (in the actor's compute dtype, on the worker's device), so
generation runs no collective: on several workers the producer thread's generation cannot interleave with the
update's collectives on the same process group. A publish gathers the actor's full weights (`full_weights`, a
collective every worker calls at the same point, between updates); given the same weights the copy computes the
actor's log-probs to the bit on the CPU.

The driver publishes the actor's weights after each step as a numbered version (a CPU snapshot) and asks for each
batch to be generated with one exact version, so which weights produced which batch does not depend on thread
timing. Snapshots older than the version last asked for are dropped: at most the rollout's lead + 1 are held.

Partial rollout (`trainer.v1.partial_rollout`, ASYNC.md): the answers are generated in chunks of
`partial_rollout_chunk` tokens; between chunks, if a newer version (at most `newest`) has been published, the copy
loads it and the answers still running continue on it. Each chunk is a fresh decoder call on prompt + the tokens so
far, so the prefix's KV cache is *recomputed* with the new weights (verl V1's resumed requests do the same: "the
KV cache is reconstructed for the retained prefix"); every token's log-prob is then exactly the weights that sampled
it, on the whole prefix, instead of a mix of old keys and new queries that no policy computes.
"""
from __future__ import annotations

import threading
import time

import torch

from engine.protocol import Batch
from engine.rollout import versions
from engine.rollout.hf_rollout import HFRollout, assemble, eos_ids
from engine.workers.build import RoleBuilder, behaviour_dtype


class BehaviourPolicy:
    def __init__(self, actor_module, build_module, build_rollout, dtype: torch.dtype | None = None):
        """`build_module()`: the actor's model as a plain module (unsharded, full weights in `dtype`, on the
        worker's device; RoleBuilder.behaviour_module); `build_rollout(module)`: the rollout that samples with it (the
        hf rollout's static decoder); `dtype`: what a publish casts the actor's weights to (the copy's)."""
        self.actor_module, self.dtype = actor_module, dtype
        # Left as loaded (requires_grad as the actor's): generation runs under no_grad either way, but on the CPU
        # a forward over weights without requires_grad takes another kernel path and differs in the last bits
        self.module = build_module()
        self.module.eval()
        self.rollout = build_rollout(self.module)
        self.version: int | None = None  # the version the copy's weights are
        self.snapshots: dict[int, dict[str, torch.Tensor]] = {}
        self.lock = threading.Lock()  # publish (the driver's main thread) vs generate (its rollout thread)

    def publish(self, version: int) -> dict:
        """Snapshot the actor's current weights as `version`: the full weights on the CPU (`full_weights`; a
        collective: every worker publishes at the same point, from the driver's main thread)."""
        start = time.perf_counter()
        self.receive(version, full_weights(self.actor_module, self.dtype))
        return {"timing_s/update_weights": time.perf_counter() - start}

    def receive(self, version: int, state: dict[str, torch.Tensor]) -> None:
        """Hold `state` (full weights, by parameter name) as `version`: a publish's snapshot, or one sent to
        separate_async's rollout process (process.py; there the policy has no actor of its own)."""
        with self.lock:
            self.snapshots[int(version)] = state

    def generate(self, batch: Batch, version: int, newest: int | None = None, chunk: int = 0,
                 on_chunk=None, max_new_tokens: int | None = None) -> tuple[Batch, dict]:
        """Answers sampled with the weights of `version` exactly (published earlier), each token's version in
        `policy_versions`. `chunk` > 0 (partial rollout): between chunks of that many tokens, switch to the newest
        published version ≤ `newest`. `on_chunk(tokens_done)`: called at each chunk boundary before the check
        (the tests publish a version there, forcing an update mid-answer without racing a thread).
        `max_new_tokens`: at most that many tokens (one chunk of carry-over's round, carry.py), with `ended`: which
        answers ended in it (the driver continues the others later)."""
        metrics, loaded = self._load(int(version))
        start = time.perf_counter()
        if chunk and chunk > 0:
            out, switches = self._generate_partial(batch, int(chunk), newest, on_chunk, metrics)
            metrics["rollout/partial_switches"] = float(switches)
        else:
            limit = {"max_new_tokens": int(max_new_tokens)} if max_new_tokens else {}
            out = self.rollout.generate(batch, validate=False, **limit)
            out.tensors[versions.KEY] = versions.stamp(out["responses"], self.version)
            if max_new_tokens:
                out.tensors["ended"] = _ended(out, int(max_new_tokens), self._stop())
        metrics["timing_s/gen_worker"] = time.perf_counter() - start - metrics.pop("_loads_s", 0.0)
        if hasattr(self.rollout, "take_freshness"):
            # the static decoder's check that it decoded the weights just loaded (rollout/weights_stale, and
            # rollout/actor_weight_change: how far they moved since the last load), reported after each load only:
            # a batch on a version already used (the rollout ahead, early on) moved nothing and says nothing about
            # the actor (the server's actor-not-moving check reads the change)
            fresh = self.rollout.take_freshness()
            if loaded or metrics.get("rollout/partial_switches"):
                metrics.update(fresh)
        return out, metrics

    def _stop(self) -> list[int]:
        rollout = self.rollout
        return [] if rollout.cfg.ignore_eos else eos_ids(rollout.module, rollout.tokenizer)

    def _newer(self, newest: int | None) -> int | None:
        """The newest published version above the loaded one and at most `newest` (None: none)."""
        with self.lock:
            found = [v for v in self.snapshots if v > self.version and (newest is None or v <= newest)]
        return max(found) if found else None

    def _generate_partial(self, batch: Batch, chunk: int, newest, on_chunk, metrics: dict) -> tuple[Batch, int]:
        rollout = self.rollout
        length = int(rollout.cfg.response_length)
        stop = self._stop()
        rows = batch["input_ids"].shape[0]
        responses = torch.full((rows, length), rollout.pad_id, dtype=torch.long)
        log_probs = torch.zeros(rows, length, dtype=torch.float32)
        stamps = torch.full((rows, length), self.version, dtype=torch.long)
        running, done, switches = torch.arange(rows), 0, 0
        while running.numel() and done < length:
            n = min(chunk, length - done)
            out = rollout.generate(_continuation(batch, responses, running, done), validate=False, max_new_tokens=n)
            responses[running, done:done + n] = out["responses"].cpu()
            log_probs[running, done:done + n] = out["rollout_log_probs"].cpu()
            stamps[running, done:done + n] = self.version
            ended = _ended(out, n, stop).cpu()
            running, done = running[~ended], done + n
            if running.numel() and done < length:
                if on_chunk is not None:
                    on_chunk(done)
                newer = self._newer(newest)
                if newer is not None:  # the answers in flight continue on the new weights
                    metrics["_loads_s"] = metrics.get("_loads_s", 0.0) + self._load(newer)[0]["timing_s/behaviour_load"]
                    switches += 1
        device = batch["input_ids"].device
        out = assemble(batch, responses.to(device), stop, rollout.pad_id)
        out.tensors["rollout_log_probs"] = log_probs.to(device) * out["response_mask"]
        out.tensors[versions.KEY] = stamps
        return out, switches

    def _load(self, version: int) -> tuple[dict, bool]:
        """Make the copy's weights those of `version`: (the load's time, whether weights were copied)."""
        with self.lock:
            if version not in self.snapshots and version != self.version:
                raise RuntimeError(f"behaviour policy: version {version} was never published (have "
                                   f"{sorted(self.snapshots)}, loaded {self.version})")
            state = self.snapshots.get(version) if version != self.version else None
            for old in [v for v in self.snapshots if v < version]:
                del self.snapshots[old]
        start = time.perf_counter()
        if state is not None:
            with torch.no_grad():
                for name, param in self.module.named_parameters():
                    param.copy_(state[name])
            self.version = version
        return {"timing_s/behaviour_load": time.perf_counter() - start}, state is not None


def build_policy(builder: RoleBuilder, tokenizer, actor_module=None) -> BehaviourPolicy:
    """The copy and the rollout that samples with it (the hf rollout's static decoder), as the worker and the rollout
    process build them. `actor_module`: the actor whose weights a publish gathers (None in the rollout process,
    which receives them)."""
    cfg = builder.cfg
    return BehaviourPolicy(actor_module, builder.behaviour_module,
                           lambda module: HFRollout(module, tokenizer, cfg.actor_rollout_ref.rollout,
                                                    builder.device_type),
                           dtype=behaviour_dtype(cfg, builder.device_type))


def _ended(out: Batch, limit: int, stop: list[int]) -> torch.Tensor:
    """Which answers of a chunk of at most `limit` tokens ended in it: fewer tokens (pad after the end token), or an
    end token as its last."""
    counts = out["response_mask"].sum(-1)
    ended = counts < limit
    if stop:
        last = out["responses"].gather(1, (counts - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        ended |= torch.isin(last, torch.tensor(stop, device=last.device))
    return ended


def _continuation(batch: Batch, responses: torch.Tensor, running: torch.Tensor, done: int) -> Batch:
    """The prompts of the rows still running with their first `done` answer tokens appended (none of them has
    ended, so the appended tokens are all real: no padding inside), positions continuing the prompt's."""
    device = batch["input_ids"].device
    idx = running.to(device)
    ids, mask, pos = batch["input_ids"][idx], batch["attention_mask"][idx], batch["position_ids"][idx]
    if done:
        ids = torch.cat([ids, responses[running, :done].to(device)], dim=1)
        mask = torch.cat([mask, torch.ones(len(running), done, dtype=mask.dtype, device=device)], dim=1)
        pos = torch.cat([pos, pos[:, -1:] + torch.arange(1, done + 1, device=device)], dim=1)
    return Batch({"input_ids": ids, "attention_mask": mask, "position_ids": pos})


@torch.no_grad()
def full_weights(module: torch.nn.Module, dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    """The actor's parameters as full tensors on the CPU, by name, in `dtype` (None: as they are): a snapshot its
    later updates do not touch. An FSDP2 parameter's full tensor is an all-gather over the workers, so this is a
    collective: every worker calls it at the same point (publish, between updates, in the driver's main thread)."""
    out = {}
    for name, param in module.named_parameters():
        full = (param.full_tensor() if hasattr(param, "full_tensor") else param).detach()
        if dtype is not None:
            full = full.to(dtype)  # on the device, before the copy to the host: half the bytes in bf16
        snapshot = full.to("cpu")
        local = param.to_local() if hasattr(param, "to_local") else param
        if snapshot.untyped_storage().data_ptr() == local.untyped_storage().data_ptr():
            snapshot = snapshot.clone()  # still the actor's own memory (a plain CPU parameter): copy it
        out[name] = snapshot
    return out
