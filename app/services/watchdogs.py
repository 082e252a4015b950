"""The watchdogs of the job lifecycle, run by the background loop.

Each job moves in its own transaction, re-checked under its row lock: a
report that arrives meanwhile wins.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.engine import read_transaction
from app.db.jobs import JobDB
from app.errors import Conflict, NotFound
from app.jobs.lifecycle import JobStatus
from app.services.jobs import reschedule
from app.settings import Settings


async def expire_leases(conn: AsyncConnection, now: datetime, settings: Settings, batch: int = 1000) -> int:
    """Matched jobs whose pilot never confirmed go back to Waiting. Returns how many."""
    async with read_transaction(conn):
        due = await JobDB.of(conn).lapsed_leases(now, batch)
    returned = 0
    for job_id in due:
        try:
            moved = await reschedule(
                conn, job_id, now, settings, source="lease", minor_status="matched lease expired",
                lease_expired_by=now,
            )  # fmt: skip
        except (Conflict, NotFound):
            continue  # confirmed or killed in the meantime
        returned += moved is not None
    return returned


async def mark_stalled(conn: AsyncConnection, now: datetime, settings: Settings, batch: int = 1000) -> int:
    """Running jobs without a status report for the stall timeout become Stalled."""
    silent_since = now - timedelta(seconds=settings.jobs.stall_timeout_seconds)
    async with read_transaction(conn):
        due = await JobDB.of(conn).silent_running(silent_since, batch)
    stalled = 0
    for job_id in due:
        async with conn.begin():
            job_db = JobDB.of(conn)
            if await job_db.stall_if_silent(job_id, silent_since):
                await job_db.record_events([job_id], JobStatus.Stalled, now, "stall", "no heartbeat")
                stalled += 1
    return stalled
