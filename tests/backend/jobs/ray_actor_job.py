"""A Ray job that uses the cluster it runs on: its driver joins the head (`ray.init()`, as a run with several
workers does) and starts an actor, so the head has a driver, a worker and an actor's server up. It says
`running`, writes the actor's pid to `<default_local_dir>/actor.pid` and waits there until it is cancelled."""
from __future__ import annotations

import os
import sys
import time

import ray

from engine.config import config_from_argv
from engine.loggers.dashboard import DashboardLogger


@ray.remote(num_cpus=0)
class Idle:
    def pid(self) -> int:
        return os.getpid()


def main(argv: list[str]) -> None:
    cfg = config_from_argv(argv)
    ray.init(logging_level="ERROR")  # the cluster of the job (RAY_ADDRESS, set by Ray's job supervisor)
    actor = Idle.remote()
    pid = ray.get(actor.pid.remote(), timeout=600)  # a hang guard
    logger = DashboardLogger.from_config(cfg)
    logger.log_status("running", total_steps=1)
    os.makedirs(cfg.trainer.default_local_dir, exist_ok=True)
    with open(os.path.join(cfg.trainer.default_local_dir, "actor.pid"), "w") as f:
        f.write(str(pid))
    while True:  # until the test cancels the run
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1:])
