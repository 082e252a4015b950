"""Running-job history: one process samples at a time, once per interval."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.priorities import SAMPLER_LOCK, PriorityDB


async def sample(conn: AsyncConnection, now: datetime, every_seconds: float, keep_seconds: float) -> bool:
    """Take one sample unless another process took one within `every_seconds`.

    Also prunes samples older than `keep_seconds`. True if a sample was taken.
    """
    async with conn.begin():
        db = PriorityDB.of(conn)
        if not await db.try_leader_lock(SAMPLER_LOCK):
            return False
        last = await db.last_sample_time()
        if last is not None and last > now - timedelta(seconds=0.9 * every_seconds):
            return False
        await db.take_sample(now)
        if keep_seconds > 0:
            await db.prune_samples(now - timedelta(seconds=keep_seconds))
    return True
