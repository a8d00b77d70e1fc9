"""Driver side of checkpoints: where they live, what the driver itself saves, and resuming.

Layout under trainer.default_local_dir (verl's):
  global_step_N/actor/, global_step_N/critic/   sharded weights + optimizer (DCP), scheduler, RNG
  global_step_N/trainer_state.json              global step, data position, KL controller, config
  latest_checkpointed_iteration.txt             N of the newest complete checkpoint
A checkpoint is written to a temporary folder and renamed when complete, and the pointer file is
replaced atomically, so a kill at any moment leaves the previous checkpoint usable.

With `checkpoint.async_save` (the default) the workers write their shards in the background: `save` returns once
the state is in host memory, and the checkpoint is completed (renamed, pointed to) by `complete`, which the loop
calls after every step without waiting (`wait=False`: only once every worker's write is done) and, waiting, before
the next save, when the after-step hook asks (engine/trainer/hooks.py) and at the end of training.
"""
from __future__ import annotations

import json
import os
import shutil
import sys

LATEST = "latest_checkpointed_iteration.txt"


def step_dir(root: str, step: int) -> str:
    return os.path.join(root, f"global_step_{step}")


def latest_step(root: str) -> int | None:
    path = os.path.join(root, LATEST)
    if not os.path.exists(path):
        return None
    text = open(path).read().strip()
    return int(text) if text.isdigit() and os.path.isdir(step_dir(root, int(text))) else None


def save(trainer) -> str:
    """Start the checkpoint of the current step; blocking only while the workers copy their state (async_save),
    or until written. Returns the folder it will have."""
    complete(trainer, wait=True)
    root, step = trainer.ckpt_root, trainer.global_step
    tmp = os.path.join(root, f".tmp_global_step_{step}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp, exist_ok=True)
    trainer.wg.all_call("save_checkpoint", tmp)
    state = {"global_step": step, "loader": trainer.batches.state_dict(),
             "kl_ctrl": trainer.kl_ctrl.state_dict() if trainer.kl_ctrl else None,
             "world": trainer.world, "config": trainer.cfg.model_dump(mode="json")}
    with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
        json.dump(state, f, indent=1)
    trainer.pending_checkpoint = step
    cfg = trainer.cfg
    if not (cfg.actor_rollout_ref.actor.checkpoint.async_save or (cfg.critic.enable and cfg.critic.checkpoint.async_save)):
        complete(trainer, wait=True)
    return step_dir(root, step)


def complete(trainer, wait: bool) -> float | None:
    """Make the pending checkpoint (if any) the resume point once every worker has written it: waits for the
    writes when `wait`, else returns at once while any is still running. Returns the seconds waited, or None
    when nothing was completed."""
    step = getattr(trainer, "pending_checkpoint", None)
    if step is None or (not wait and not all(trainer.wg.all_call("checkpoint_written"))):
        return None
    waited = max(trainer.wg.all_call("finish_checkpoint"))
    root = trainer.ckpt_root
    final, tmp = step_dir(root, step), os.path.join(root, f".tmp_global_step_{step}")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    pointer = os.path.join(root, LATEST + ".tmp")
    with open(pointer, "w") as f:
        f.write(str(step))
    os.replace(pointer, os.path.join(root, LATEST))
    _prune(root, trainer.cfg.trainer.max_actor_ckpt_to_keep)
    trainer.pending_checkpoint = None
    return waited


def _prune(root: str, keep: int | None) -> None:
    if not keep or keep <= 0:
        return
    steps = sorted(int(d.rsplit("_", 1)[1]) for d in os.listdir(root)
                   if d.startswith("global_step_") and d.rsplit("_", 1)[1].isdigit())
    for s in steps[:-keep]:
        shutil.rmtree(step_dir(root, s), ignore_errors=True)


def resume_dir(trainer) -> str | None:
    tr = trainer.cfg.trainer
    if tr.resume_mode == "disable":
        return None
    if tr.resume_mode == "resume_path":
        path = os.path.expanduser(tr.resume_from_path)
        if not os.path.isfile(os.path.join(path, "trainer_state.json")):
            raise FileNotFoundError(f"trainer.resume_from_path={tr.resume_from_path}: not a checkpoint folder "
                                    f"(expected global_step_N with trainer_state.json inside).")
        return path
    step = latest_step(trainer.ckpt_root)
    if step is None and os.path.exists(os.path.join(trainer.ckpt_root, LATEST)):
        # the pointer names a checkpoint that is gone (deleted or moved): say so rather than restart silently
        print(f"[rlstudio] warning: {os.path.join(trainer.ckpt_root, LATEST)} names a checkpoint folder that does "
              "not exist; starting from step 0 (use trainer.resume_mode=resume_path to pick one).",
              file=sys.stderr, flush=True)
    return step_dir(trainer.ckpt_root, step) if step is not None else None


def maybe_resume(trainer) -> int:
    path = resume_dir(trainer)
    if path is None:
        return 0
    with open(os.path.join(path, "trainer_state.json")) as f:
        state = json.load(f)
    trainer.wg.all_call("load_checkpoint", path)
    trainer.batches.load_state_dict(state["loader"])
    if trainer.kl_ctrl is not None and state.get("kl_ctrl"):
        trainer.kl_ctrl.load_state_dict(state["kl_ctrl"])
    trainer.logger.log_status("resumed", step=state["global_step"], path=path)
    return int(state["global_step"])
