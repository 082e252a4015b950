"""Running-job history: one process samples at a time, once per interval."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.reported_running import ReportedRunningDB
from fairmatch.db.running_samples import SAMPLER_LOCK, RunningSampleDB


async def sample(
    conn: AsyncConnection, now: datetime, every_seconds: float, keep_seconds: float, reported_seconds: float
) -> bool:
    """Take one sample unless another process took one within `every_seconds`; running jobs
    other systems reported count for `reported_seconds` after their report.

    Also prunes samples older than `keep_seconds`. True if a sample was taken.
    """
    async with conn.begin():
        db = RunningSampleDB.of(conn)
        if not await db.try_leader_lock(SAMPLER_LOCK):
            return False
        last = await db.last_sample_time()
        if last is not None and last > now - timedelta(seconds=0.9 * every_seconds):
            return False
        await db.take_sample(now, reported_since=now - timedelta(seconds=reported_seconds))
        if keep_seconds > 0:
            await db.prune_samples(now - timedelta(seconds=keep_seconds))
    return True


async def report_running(
    conn: AsyncConnection, source: str, running: Iterable[tuple[str, str, int]], now: datetime
) -> int:
    """Replace what `source` reports running, per (group, owner); how many groups it names."""
    counts = [(group, owner, jobs) for group, owner, jobs in running if jobs > 0]
    async with conn.begin():
        await ReportedRunningDB.of(conn).replace(source, counts, now)
    return len({group for group, _, _ in counts})
