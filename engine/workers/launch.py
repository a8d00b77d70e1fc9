"""Starting a run's workers: one in this process (no Ray), or one Ray actor per worker.

`ray_init.mode`: `in_process` runs the single worker inside the driver; `ray` always goes through Ray (a
local Ray started for the run, or the cluster at ray_init.address / RAY_ADDRESS, as under `ray job submit`);
`auto` picks in-process for one worker with no cluster to join and no `ray_init.runtime_env`, Ray otherwise.
`ray_init.runtime_env` (verl 0.9: `ray_kwargs.ray_init.runtime_env.*`) goes to `ray.init` as Ray's own runtime_env.
"""
from __future__ import annotations

import copy
import os
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from engine.config import ConfigError, uses_reference, world_size
from engine.config.trainer_mode import is_async
from engine.distributed.worker_group import WORKER_ENV, InProcessWorkerGroup, WorkerGroup
from engine.workers.worker import TrainWorker, free_port


def uses_ray(cfg, in_process: bool = False) -> bool:
    """Whether the run's workers go through Ray; `in_process`: ray_init.mode=auto keeps one worker in this process
    even where RAY_ADDRESS names a cluster (engine.train's notebook runs). ray_init.mode=in_process with several workers or a runtime_env is
    refused by the config's resolve (engine/config/resolve.py); a cluster of several nodes depends on where the
    job runs (RAY_ADDRESS), so it is checked here."""
    world = world_size(cfg)
    mode = cfg.ray_init.mode
    cluster = cfg.ray_init.address or os.environ.get("RAY_ADDRESS")
    if cfg.trainer.nnodes > 1 and not cluster:
        raise ConfigError(
            f"trainer.nnodes={cfg.trainer.nnodes} runs on a Ray cluster of that many nodes, but none is named, and the "
            "Ray this command would start has one node.", "trainer.nnodes",
            "Start the nodes (`ray start --head` on one, `ray start --address=HEAD:6379` on the others) and pass "
            "ray_init.address=HEAD:6379 (or submit with `ray job submit`); on one machine use trainer.nnodes=1 "
            "trainer.n_gpus_per_node=N.")
    if mode == "in_process" or (in_process and mode == "auto" and world == 1 and not cfg.ray_init.runtime_env):
        return False
    if mode == "ray":
        return True
    return world > 1 or bool(cluster) or bool(cfg.ray_init.runtime_env)


def worker_concurrency(cfg) -> int:
    """Calls a Ray worker actor runs at once. The async modes: 2, so that the rollout thread's behaviour_generate
    runs beside the main thread's update instead of queueing behind it. Safe: the driver's main thread issues one
    call at a time and waits for it, and the rollout thread at most one more (behaviour_generate), which runs no
    collective (the behaviour copy is unsharded, behaviour.py), so the collectives on the workers' process group keep
    one order, the main thread's; the two calls then share the worker as the in-process worker's two threads do
    (the behaviour policy's snapshots under its lock). Sync: 1, every call in order."""
    return 2 if is_async(cfg) else 1


def worker_env(cfg) -> dict[str, str]:
    """The environment variables of each Ray worker: rlstudio's (WORKER_ENV), then the user's
    ray_init.runtime_env.env_vars, which win (an actor's own env_vars would otherwise override the job's)."""
    return {**WORKER_ENV, **cfg.ray_init.runtime_env.get("env_vars", {})}


LOOPBACK_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextmanager
def loopback_only():
    """A Ray this process starts for itself listens on 127.0.0.1 only: its node gets the loopback address, which
    Ray's single-machine switch keeps (without it Ray swaps in the machine's own address and its GCS, raylet and
    workers listen on every interface; backend/services/dispatch/local_head.py has the details). The variable reaches Ray's
    processes through their environment; for this process Ray read it at import, so its flag is set too. Both are
    put back once Ray is up, so a later `ray.init(address=...)` of this process can join a cluster of several
    machines. A value the user set is kept."""
    from ray._private import ray_constants

    if LOOPBACK_ONLY_ENV in os.environ:
        yield
        return
    flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_ONLY_ENV], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        os.environ.pop(LOOPBACK_ONLY_ENV, None)
        ray_constants.ENABLE_RAY_CLUSTER = flag


def start_ray(cfg) -> bool:
    """Connect to an existing cluster (ray_init.address or RAY_ADDRESS, as under `ray job submit`), or start
    a local one. Returns True when this process started Ray and so must stop it."""
    import ray

    if ray.is_initialized():
        return False
    address = cfg.ray_init.address or os.environ.get("RAY_ADDRESS")
    runtime_env = copy.deepcopy(cfg.ray_init.runtime_env) or None  # a plain dict: Ray fills in its own keys
    kwargs = dict(log_to_driver=True, logging_level="ERROR", runtime_env=runtime_env)
    try:
        if address:
            ray.init(address=address, **kwargs)
            return False
        # address="local": always a new Ray of our own. Without it ray.init() would join whatever cluster
        # /tmp/ray/ray_current_cluster names (e.g. a `ray start` head on this machine, possibly long gone).
        with loopback_only():
            ray.init(address="local", num_cpus=cfg.ray_init.num_cpus, num_gpus=cfg.ray_init.num_gpus,
                     include_dashboard=False, **kwargs)
    except (TypeError, ValueError) as exc:
        if runtime_env and "runtime" in str(exc).lower():  # e.g. an env var the submitted job's runtime_env sets too
            raise ConfigError(f"Ray refused ray_init.runtime_env (verl 0.9: ray_kwargs.ray_init.runtime_env) = "
                              f"{runtime_env}: {exc}", "ray_init.runtime_env", "Fix or remove the key.") from None
        raise
    return True


PY_EXECUTABLE_GUARD_S = 600  # a hang guard on the check's `import ray`, not a wait


def workers_run_here(owns_ray: bool) -> bool:
    """Whether Ray's workers start on this machine: a Ray this process started, or a cluster of one live node
    (the driver's: a `ray job submit` to a single head, the dashboard's own head)."""
    if owns_ray:
        return True
    import ray

    return sum(1 for node in ray.nodes() if node.get("Alive")) == 1


def check_py_executable(cfg, here: bool) -> None:
    """`ray_init.runtime_env.py_executable` starts every Ray worker (Ray runs `<it> <worker args>` through bash).
    One that cannot start makes Ray retry the worker forever and the run hang at its first call, so on the machine
    the workers start on it is tried first: `<it> -c 'import ray'` must succeed, else the run fails naming it
    and what it said. (A cluster of several nodes starts workers elsewhere: not checked there.)"""
    exe = cfg.ray_init.runtime_env.get("py_executable")
    if not exe or not here:
        return
    env = {**os.environ, **{k: str(v) for k, v in cfg.ray_init.runtime_env.get("env_vars", {}).items()}}
    workdir = cfg.ray_init.runtime_env.get("working_dir")  # where the workers start (`uv run` reads its project)
    cwd = workdir if isinstance(workdir, str) and os.path.isdir(workdir) else None
    command = f"{exe} -c 'import ray'"
    field = "ray_init.runtime_env.py_executable"
    key = f"{field} (verl 0.9: ray_kwargs.ray_init.runtime_env.py_executable)"
    try:
        done = subprocess.run(["bash", "-c", command], env=env, cwd=cwd, capture_output=True, text=True, check=False,
                              timeout=PY_EXECUTABLE_GUARD_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{key} = {exe!r}: `{command}` did not finish within {PY_EXECUTABLE_GUARD_S} s, so Ray's "
                          "workers could not start with it.", field, "Fix or remove the key.") from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())[-1000:] or "nothing"
        raise ConfigError(f"{key} = {exe!r} cannot start Ray's workers: `{command}` exited with {done.returncode} "
                          f"and said: {said}", field,
                          "Fix or remove the key (it must run a Python with this Ray installed).")


@dataclass
class Workers:
    group: WorkerGroup | None
    info: dict  # rank 0's report from `TrainWorker.init`: device_name, n_params, ...
    owns_ray: bool  # this process started the Ray it runs on, so stops it

    @property
    def launcher(self) -> str:
        return "in-process" if isinstance(self.group, InProcessWorkerGroup) else "ray"

    def stop(self) -> None:
        if self.group is not None:
            try:
                self.group.all_call("shutdown")
            except Exception:  # noqa: BLE001 - workers may already be gone
                pass
            self.group.shutdown()
        if self.owns_ray:
            import ray

            ray.shutdown()


def first_call(group, cfg) -> tuple[str, int]:
    """Rank 0's address: the first call on the workers, where a runtime_env Ray could not set up shows."""
    from ray.exceptions import RayActorError, RuntimeEnvSetupError

    try:
        return group.rank0_call("address")
    except (RuntimeEnvSetupError, RayActorError) as exc:
        text = str(exc).lower()
        setup = isinstance(exc, RuntimeEnvSetupError) or "runtime_env" in text or "runtime env" in text
        if not (cfg.ray_init.runtime_env and setup):
            raise
        detail = " ".join(str(exc).split())[:1500]
        raise ConfigError(f"Ray could not set up ray_init.runtime_env (verl 0.9: ray_kwargs.ray_init.runtime_env) = "
                          f"{cfg.ray_init.runtime_env} for the workers: {detail}", "ray_init.runtime_env",
                          "Fix or remove the key.") from None


def start_workers(cfg, total_steps: int, device: str, worker_cls=None, in_process: bool = False) -> Workers:
    """Create the run's TrainWorkers, join them in one torch.distributed group and build every role on them.
    `worker_cls`: another class with TrainWorker's constructor, `address` and `init` (the tests' probes)."""
    worker_cls = worker_cls or TrainWorker

    uses_ref = uses_reference(cfg)
    owns_ray = False
    group = None
    try:
        if uses_ray(cfg, in_process):
            from engine.distributed.ray_worker_group import RayWorkerGroup, plan_resources

            owns_ray = start_ray(cfg)
            check_py_executable(cfg, workers_run_here(owns_ray))
            placement = plan_resources(device, cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node)
            group = RayWorkerGroup(worker_cls, placement, init_args=(cfg, total_steps, device, placement.num_cpus),
                                   env_vars=worker_env(cfg), max_concurrency=worker_concurrency(cfg))
            addr, port = first_call(group, cfg)
        else:
            # the worker keeps this process's thread count (on CPU a Ray worker gets its share of the cores)
            group = InProcessWorkerGroup(worker_cls, init_args=(cfg, total_steps, device, torch.get_num_threads()))
            addr, port = "127.0.0.1", free_port()
        info = group.all_call("init", addr, port, uses_ref)[0]
        if hasattr(group, "describe_placement"):  # which Ray node runs which rank, for the `started` line
            info["placement"] = group.describe_placement()
    except BaseException:
        Workers(group, {}, owns_ray).stop()
        raise
    return Workers(group, info, owns_ray)
