"""A real, tiny stand-in for `engine.main_ppo` that the dispatch tests launch as a Ray job: it reads its config
from the same command line (the server's `--config-file`), logs through the real DashboardLogger, and can run
long (to be cancelled).
It records its own pid and a child process's pid in the run directory, so a test can check they die."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from engine.config import config_from_argv
from engine.loggers.dashboard import DashboardLogger
from engine.trainer.hooks import after_step_hook


def main(argv: list[str]) -> None:
    cfg = config_from_argv(argv)
    steps = cfg.trainer.total_training_steps or 3
    extra = cfg.trainer.model_extra or {}  # `+trainer.tiny_step_seconds=5`, `+trainer.tiny_fail=true`
    step_seconds = float(extra.get("tiny_step_seconds", 0.05))
    pid_dir = cfg.trainer.default_local_dir
    os.makedirs(pid_dir, exist_ok=True)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.path.join(pid_dir, "pids.txt"), "w") as f:
        f.write(f"{os.getpid()} {child.pid}\n")
    logger = DashboardLogger.from_config(cfg)
    if "tiny_close_timeout" in extra:  # how long close() waits for an unreachable server before spooling
        logger.close_timeout = float(extra["tiny_close_timeout"])
    logger.log_status("running", total_steps=steps)
    after_step = after_step_hook()  # as the real trainer does (the tests' gate: tests/step_hold.py)
    for step in range(1, steps + 1):
        print(f"step {step}/{steps} score={step / steps:.3f}", flush=True)
        logger.log_metrics(step, {"critic/score/mean": step / steps, "actor/pg_loss": 1.0 / step,
                                  "training/global_step": step, "training/total_steps": steps})
        logger.log_samples(step, [{"step": step, "split": "train", "prompt_index": i, "group_uid": f"g{i}",
                                   "prompt": f"{i}+{step}=", "response": str(i + step), "score": 1.0,
                                   "reward": 1.0, "ground_truth": str(i + step), "data_source": "arith",
                                   "tokens": ["1", "2"], "old_log_probs": [-0.1, -0.2]} for i in range(4)])
        if after_step is not None:
            after_step(step, None)
        time.sleep(step_seconds)
    # a held-out score that tells the learning rates of a sweep apart: 1e-4 -> 0.1, 3e-4 -> 0.3
    logger.log_metrics(steps, {"val-core/arith/reward/mean@1": min(1.0, cfg.actor_rollout_ref.actor.optim.lr * 1000)})
    if extra.get("tiny_fail"):
        logger.close()
        child.kill()  # a failed run ends its own processes too (else the sleeper outlives the test by 10 min)
        print("failing on purpose", flush=True)
        raise SystemExit(3)
    logger.log_status("succeeded")
    logger.close()
    child.kill()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
