"""Where the jobs go: the cluster at `settings.ray_address` (its token from the settings, RAY_AUTH_TOKEN or
Ray's token file), or a local head this server starts and owns (backend/services/ray_head.py), healed when it
dies under the server. Holds the job client every other part uses."""
from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from backend.services.ray_head import LocalRayHead, read_token
from backend.settings import Settings

log = logging.getLogger("rlstudio.dispatch")
# Ray's job client logs at INFO on Ray's own console handler, e.g. "WebSocket closed for job ..." each time a run's
# log tail ends: the run's log and this server's own lines say what happened
RAY_CLIENT_LOGGERS = ("ray.dashboard.modules.job.sdk", "ray.dashboard.modules.dashboard_sdk")


def quiet_ray_job_client() -> None:
    """Only warnings and errors from Ray's job client."""
    import ray.dashboard.modules.job.sdk  # noqa: F401 - importing it sets its loggers to INFO: ours comes after

    for name in RAY_CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def cluster_token(settings: Settings) -> str | None:
    """The token of the cluster at `settings.ray_address`: the setting, RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH's
    file or ~/.ray/auth_token, the first that is there."""
    if settings.ray_auth_token is not None:
        return settings.ray_auth_token.get_secret_value()
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"]
    for candidate in (os.environ.get("RAY_AUTH_TOKEN_PATH"), str(Path.home() / ".ray" / "auth_token")):
        if candidate and Path(candidate).is_file():
            return read_token(Path(candidate))
    return None


class RayConnection:
    """The job client (`client`) on the cluster at `address`; `head` is the local head this server owns, if
    any. `on_state` hears what the connection is doing (the dispatcher's /healthz line)."""

    def __init__(self, settings: Settings, on_state: Callable[[str], None] = lambda state: None):
        self.settings, self.on_state = settings, on_state
        self.head: LocalRayHead | None = None
        self.client = None
        self.address: str | None = None

    async def connect(self) -> None:
        if self.settings.ray_address:
            self.address, token = self.settings.ray_address, cluster_token(self.settings)
        else:
            self.on_state("starting a local Ray head")
            self.head = LocalRayHead(self.settings.data_dir, self.settings.ray_num_cpus,
                                     self.settings.ray_head_host)
            self.address = await asyncio.to_thread(self.head.start)
            token = self.head.token
        await self._open_client(token)

    async def _open_client(self, token: str | None) -> None:
        from ray.job_submission import JobSubmissionClient

        quiet_ray_job_client()
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self.client = await asyncio.to_thread(JobSubmissionClient, self.address, headers=headers)

    def ready_state(self) -> str:
        state = f"ray {self.address}"
        if self.head is not None:
            state += (" (local head owned by this server, re-attached: started by an earlier server on this "
                      "data dir)" if self.head.attached else " (local head owned by this server)")
        return state

    def head_note(self) -> str | None:
        """What the owned head logged (for a submission it never took), or None on a cluster."""
        return None if self.head is None else self.head.why_dead()

    async def heal(self, lose: Callable[[str], None]) -> bool:
        """The head this server owns can die under it (the OOM killer, a component that crashed: `ray start
        --block` then takes every component down). Its jobs died with it: `lose(reason)` is called first (the
        dispatcher makes their runs `lost`, saying why), then a new head starts. Returns True when the head was
        dead and a new one is up."""
        if self.head is None or self.head.alive():
            return False
        why = self.head.why_dead()
        log.error("the local Ray head at %s died (%s); starting a new one", self.address, why)
        lose(f"The server's local Ray head ({self.address}) died while the run was in flight, "
             f"and its Ray job with it. {why}")
        self.on_state("restarting the local Ray head")
        await asyncio.to_thread(self.head.stop)  # whatever is left of its process group
        self.head.attached = False
        self.address = await asyncio.to_thread(self.head.start)
        await self._open_client(self.head.token)
        self.on_state(self.ready_state())
        return True

    async def stop_head(self) -> bool:
        """Stop the owned head (and every job on it); False when there is none."""
        if self.head is None:
            return False
        await asyncio.to_thread(self.head.close)  # also one still starting in connect()'s thread
        return True
