"""After a job ended: what its dashboard logger left in its spool file (the server was down for longer than the
logger waits at exit; engine/loggers/dashboard.py) is sent to the server, in order, under a new ingest token
(the job's own went with it). A spool that cannot be sent stays for the next start."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session

from backend.models import Run
from backend.services.runs import new_token
from engine.loggers.dashboard_spool import Spool
from engine.loggers.dashboard_spool import replay as replay_spool

log = logging.getLogger("rlstudio.dispatch")


def spool_file(run_dir: str | Path, run_id: int) -> Path:
    """Where a job's logger spools (the server gives the job RLSTUDIO_SPOOL_DIR=<run dir>/spool)."""
    return Path(run_dir) / "spool" / f"run-{run_id}.jsonl"


async def replay(engine: Engine, run_id: int, server_url: str) -> int | None:
    """Send the run's spooled requests to the server at `server_url`; how many were sent (None: nothing to send,
    or the sending failed and the file stays)."""
    with Session(engine, expire_on_commit=False) as session:
        run = session.get(Run, run_id)
        if run is None or not run.run_dir:
            return None
        path = spool_file(run.run_dir, run_id)
        if not Spool(str(path)).pending():
            return None
        token, run.ingest_token_hash = new_token()
        session.add(run)
        session.commit()
    try:
        sent = await asyncio.to_thread(replay_spool, str(path), server_url, token)
    except Exception as exc:  # noqa: BLE001 - the file stays; the next start tries again
        log.warning("run %s: could not replay its logger's spool %s: %s", run_id, path, exc)
        return None
    log.info("run %s: replayed %s request(s) its logger had spooled", run_id, sent)
    return sent
