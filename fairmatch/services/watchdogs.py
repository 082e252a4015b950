"""The watchdogs of the job lifecycle, run by the background loop.

Each job moves in its own transaction, re-checked under its row lock: a
report that arrives meanwhile wins.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.engine import read_transaction
from fairmatch.db.jobs import JobDB
from fairmatch.errors import Conflict, NotFound
from fairmatch.jobs.lifecycle import NO_HEARTBEAT, SYSTEM, JobStatus, lease_lapsed, stalled_out
from fairmatch.services import accounting
from fairmatch.services.jobs import UNRESTRICTED, lock_for_transition, reschedule
from fairmatch.settings import Settings


async def expire_leases(conn: AsyncConnection, now: datetime, settings: Settings, batch: int = 1000) -> int:
    """Matched jobs whose pilot never confirmed go back to Waiting. Returns how many."""
    async with read_transaction(conn):
        due = await JobDB.of(conn).lapsed_leases(now, batch)
    returned = 0
    for job_id in due:
        try:
            moved = await reschedule(
                conn, job_id, now, settings, source="lease", minor_status="matched lease expired",
                only_if=lambda row: lease_lapsed(row, now), counted=True, by=SYSTEM,
            )  # fmt: skip
        except (Conflict, NotFound):
            continue  # confirmed or killed in the meantime
        returned += moved is not None
    return returned


async def mark_stalled(conn: AsyncConnection, now: datetime, settings: Settings, batch: int = 1000) -> int:
    """Running jobs without a status report for the stall timeout become Stalled."""
    silent_since = now - timedelta(seconds=settings.jobs.stall_timeout_seconds)
    async with read_transaction(conn):
        due = await JobDB.of(conn).silent(JobStatus.Running, silent_since, batch)
    stalled = 0
    for job_id in due:
        async with conn.begin():
            job_db = JobDB.of(conn)
            if await job_db.stall_if_silent(job_id, silent_since):
                await job_db.record_events([job_id], JobStatus.Stalled, now, "stall", NO_HEARTBEAT, by=SYSTEM)
                stalled += 1
    return stalled


STALLED_TOO_LONG = "Stalled too long"


async def settle_stalled(conn: AsyncConnection, now: datetime, settings: Settings, batch: int = 1000) -> int:
    """Jobs Stalled for `jobs.stalled_fail_seconds` with no report become Failed, or are
    rescheduled with `jobs.reschedule_stalled`. Returns how many moved."""
    silent = settings.jobs.stall_timeout_seconds + settings.jobs.stalled_fail_seconds
    async with read_transaction(conn):
        due = await JobDB.of(conn).silent(JobStatus.Stalled, now - timedelta(seconds=silent), batch)
    moved = 0
    for job_id in due:
        done: object  # the moved job (its row or its id), or None when it did not move
        try:
            if settings.jobs.reschedule_stalled:
                done = await reschedule(conn, job_id, now, settings, source="stall", minor_status=STALLED_TOO_LONG,
                                        only_if=lambda row: stalled_out(row, now, settings.jobs), counted=True,
                                        by=SYSTEM)  # fmt: skip
            else:
                done = await _fail_stalled(conn, job_id, now, settings)
        except (Conflict, NotFound):
            continue  # reported or killed in the meantime
        moved += done is not None
    return moved


async def _fail_stalled(conn: AsyncConnection, job_id: int, now: datetime, settings: Settings) -> int | None:
    """Stalled -> Failed under the row lock, unless a report came meanwhile."""
    async with conn.begin():
        job_db = JobDB.of(conn)
        locked = await lock_for_transition(job_db, job_id, JobStatus.Failed, UNRESTRICTED)
        if not stalled_out(locked, now, settings.jobs):
            return None
        row = await job_db.update(job_id, status=JobStatus.Failed.value, minor_status=STALLED_TOO_LONG, finished_at=now)
        await job_db.record_events([job_id], JobStatus.Failed, now, "stall", STALLED_TOO_LONG, by=SYSTEM)
        await accounting.charge(conn, row, now, settings)  # what it reported using, as any failure
    return job_id
