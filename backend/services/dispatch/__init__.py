"""Runs as Ray jobs, in parts that each read (and test) alone; the dispatcher (coordinator.py) wires them:

- head.py: the connection to Ray — a cluster's address, or a local head this server starts, owns and heals;
- reconcile.py: at the start, the database's in-flight runs against the cluster's jobs (`lost`, with the reason);
- queue.py: rlstudio's FIFO queue under `max_concurrent_runs`;
- submit.py: a queued run's config file, entrypoint and environment, and its submission, retried while Ray is
  not ready;
- logs.py: each job's output tailed into the log table, completed from the full log when it ends;
- spool.py: a finished job's spooled logger requests sent in under a new token;
- records.py: the in-flight runs and how a run ends, shared by the parts."""
from backend.services.dispatch.coordinator import Dispatcher
from backend.services.dispatch.head import quiet_ray_job_client
from backend.services.dispatch.submit import job_command

__all__ = ["Dispatcher", "job_command", "quiet_ray_job_client"]
