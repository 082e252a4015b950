"""Running-job history: periodic samples and the averages the corrector needs.

A sample records, at one instant, how many jobs are Matched or Running per
group (owner '') and per (group, owner). The average over a time span is the
sum of an entity's counts divided by the number of samples in the span, so
instants where it ran nothing count as zero.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.clock import as_utc
from app.db.advisory import try_lock
from app.db.tables import history_samples, jobs, running_samples
from app.jobs.lifecycle import JobStatus

GROUP_LEVEL = ""  # the owner column of a group's own row
SAMPLER_LOCK = 7_100_002
RUNNING = (JobStatus.Matched.value, JobStatus.Running.value)


async def sample(conn: AsyncConnection, now: datetime, every_seconds: float, keep_seconds: float) -> bool:
    """Take one sample unless another process took one within `every_seconds`.

    Also prunes samples older than `keep_seconds`. True if a sample was taken.
    """
    async with conn.begin():
        if not await try_lock(conn, SAMPLER_LOCK):
            return False
        last = (await conn.execute(select(func.max(history_samples.c.sampled_at)))).scalar()
        if last is not None and as_utc(last) > now - timedelta(seconds=0.9 * every_seconds):
            return False
        sample_id = (
            await conn.execute(insert(history_samples).values(sampled_at=now).returning(history_samples.c.id))
        ).scalar_one()
        counts = (
            await conn.execute(
                select(jobs.c.owner_group, jobs.c.owner, func.count())
                .where(jobs.c.status.in_(RUNNING))
                .group_by(jobs.c.owner_group, jobs.c.owner)
            )
        ).all()
        rows = _sample_rows(sample_id, counts)
        if rows:
            await conn.execute(insert(running_samples), rows)
        if keep_seconds > 0:
            await conn.execute(
                delete(history_samples).where(history_samples.c.sampled_at < now - timedelta(seconds=keep_seconds))
            )
    return True


def _sample_rows(sample_id: int, counts: list) -> list[dict]:
    per_group: dict[str, int] = {}
    rows = []
    for group, owner, running in counts:
        rows.append({"sample_id": sample_id, "owner_group": group, "owner": owner, "running": running})
        per_group[group] = per_group.get(group, 0) + running
    rows += [
        {"sample_id": sample_id, "owner_group": g, "owner": GROUP_LEVEL, "running": n} for g, n in per_group.items()
    ]
    return rows


async def average_running(conn: AsyncConnection, group: str | None, since: datetime) -> dict[str, float]:
    """Average running jobs since `since`: per group (group=None) or per owner of `group`."""
    in_span = history_samples.c.sampled_at >= since
    samples = (await conn.execute(select(func.count()).where(in_span))).scalar_one()
    if samples == 0:
        return {}
    if group is None:
        entity = running_samples.c.owner_group
        which = running_samples.c.owner == GROUP_LEVEL
    else:
        entity = running_samples.c.owner
        which = (running_samples.c.owner_group == group) & (running_samples.c.owner != GROUP_LEVEL)
    totals = await conn.execute(
        select(entity, func.sum(running_samples.c.running))
        .join(history_samples, history_samples.c.id == running_samples.c.sample_id)
        .where(in_span, which)
        .group_by(entity)
    )
    return {name: float(total) / samples for name, total in totals}
