"""A run's job output into the log table (source `job`): tailed while the job runs, then completed from the
job's full log once it ended. Line numbers make a server that starts again (Ray replays a log from its start)
store each line once."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

from sqlalchemy import func
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from backend.models import LogLine
from backend.services.events import EventBus
from backend.services.logs import insert_lines

log = logging.getLogger("rlstudio.dispatch")
BATCH_LINES, BATCH_S = 200, 0.3  # a tail stores its lines in batches of up to this many, or this often
DRAIN_WAIT_S = 5.0  # after the job ended, how long its tail may take to finish before the full log fills the rest


def screen_line(line: str) -> str:
    """What a terminal shows of a line rewritten with carriage returns (progress bars)."""
    line = line.rstrip("\r")
    return line.rsplit("\r", 1)[-1]


class JobLogs:
    """`client()`: the job client now (it changes when a dead head is replaced)."""

    def __init__(self, engine: Engine, bus: EventBus, client: Callable[[], object]):
        self.engine, self.bus, self.client = engine, bus, client
        self.followers: dict[int, asyncio.Task] = {}

    def stored_lines(self, run_id: int) -> int:
        with Session(self.engine) as session:
            return session.exec(select(func.count()).select_from(LogLine).where(
                LogLine.run_id == run_id, LogLine.source == "job")).one()

    def store(self, run_id: int, first_seq: int, lines: list[str]) -> None:
        if not lines:
            return
        now = time.time()
        with Session(self.engine) as session:
            insert_lines(session, run_id, "job", [(first_seq + i, text, now) for i, text in enumerate(lines)])
        self.bus.notify()

    # ------------------------------------------------------------------------------------------ tail
    def follow(self, run_id: int, submission_id: str) -> None:
        """Tail the job's output in a task of its own (unless one already does)."""
        if run_id not in self.followers:
            self.followers[run_id] = asyncio.create_task(self._follow(run_id, submission_id))

    async def _follow(self, run_id: int, submission_id: str) -> None:
        try:
            await self.store_stream(run_id, self.client().tail_job_logs(submission_id))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the final drain fills any gap
            log.info("log tail of run %s ended: %s", run_id, exc)
        finally:
            self.followers.pop(run_id, None)

    async def store_stream(self, run_id: int, chunks: AsyncIterator[str]) -> None:
        """Store the lines of a job's output as its chunks arrive (a chunk may end inside a line); the lines
        already stored (by an earlier tail of the same log) are skipped."""
        skip = await asyncio.to_thread(self.stored_lines, run_id)
        seq, pending, batch, last_flush = 0, "", [], time.monotonic()
        async for chunk in chunks:
            pending += chunk
            *complete, pending = pending.split("\n")
            for line in complete:
                if seq >= skip:
                    batch.append(screen_line(line))
                seq += 1
            if batch and (len(batch) >= BATCH_LINES or time.monotonic() - last_flush > BATCH_S):
                await asyncio.to_thread(self.store, run_id, seq - len(batch), batch)
                batch, last_flush = [], time.monotonic()
        if pending:
            if seq >= skip:
                batch.append(screen_line(pending))
            seq += 1
        await asyncio.to_thread(self.store, run_id, seq - len(batch), batch)

    # ----------------------------------------------------------------------------------------- drain
    async def drain(self, run_id: int, submission_id: str) -> None:
        """After the job ends: let the tail finish, then add whatever it missed from the full log."""
        follower = self.followers.get(run_id)
        if follower is not None:
            try:
                await asyncio.wait_for(asyncio.shield(follower), DRAIN_WAIT_S)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                follower.cancel()
        try:
            text = await asyncio.to_thread(self.client().get_job_logs, submission_id)
        except Exception:  # noqa: BLE001
            return
        await self.store_missing(run_id, text)

    async def store_missing(self, run_id: int, text: str) -> None:
        """Store the lines of a job's full log past those already stored."""
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        stored = await asyncio.to_thread(self.stored_lines, run_id)
        if len(lines) > stored:
            await asyncio.to_thread(self.store, run_id, stored, [screen_line(x) for x in lines[stored:]])

    async def stop(self) -> None:
        for task in self.followers.values():
            task.cancel()
        await asyncio.gather(*self.followers.values(), return_exceptions=True)
