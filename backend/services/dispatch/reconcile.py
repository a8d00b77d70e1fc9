"""At the server's start: what the database believes against what the cluster has. A run the database calls
starting/running whose Ray job no longer exists is `lost`, saying why; one whose job is still there (the server
was killed, its head was not, and the server re-attached) is left to be followed again."""
from __future__ import annotations

import asyncio
import logging

from sqlalchemy.engine import Engine

from backend.models import RunStatus
from backend.services.dispatch import records
from backend.services.dispatch.local_head import HeadRecord
from backend.services.events import EventBus

log = logging.getLogger("rlstudio.dispatch")


def missing(exc: Exception) -> bool:
    """Whether the job client's error says the job does not exist."""
    text = str(exc).lower()
    return "does not exist" in text or "404" in text or "not found" in text


async def reconcile(engine: Engine, bus: EventBus, client, address: str | None, dead: HeadRecord | None) -> None:
    """`client`: the job client on the cluster at `address`; `dead`: the record of this server's earlier head,
    found dead at the start (None if there was none, or it lives)."""
    for run in records.in_flight(engine):
        if not run.submission_id:
            records.finish(engine, bus, run.id, RunStatus.lost, "The server stopped before the run was submitted to Ray.")
            continue
        try:
            await asyncio.to_thread(client.get_job_info, run.submission_id)
        except Exception as exc:  # noqa: BLE001
            if missing(exc) and dead is not None:
                records.finish(engine, bus, run.id, RunStatus.lost,
                               f"The server's local Ray head (pid {dead.pid}, {dead.address}) had died when "
                               f"the server started again, and Ray job {run.submission_id} with it.")
            elif missing(exc):
                records.finish(engine, bus, run.id, RunStatus.lost,
                               f"Ray job {run.submission_id} no longer exists on {address} (the Ray "
                               "cluster was restarted, or the server that owned it stopped); found when "
                               "the server started.")
            else:
                log.warning("reconcile: run %s: %s", run.id, exc)
