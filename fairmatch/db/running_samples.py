"""Running-job samples' SQL: the history of the jobs holding a slot, per group and owner,
which share corrections, the console's chart and the drift of shares read."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from sqlalchemy import delete, func, insert, select

from fairmatch.clock import as_utc
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.tables import history_samples, jobs, reported_running, running_samples
from fairmatch.jobs.lifecycle import HOLDING_A_SLOT
from fairmatch.priority.history import GROUP_LEVEL, sample_rows

# transaction-scoped advisory lock: one history sampler at a time
SAMPLER_LOCK = 7_100_002
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # before any sample


class RunningSampleDB(AreaDB):
    """Samples of the running jobs, taken once per interval by one process."""

    async def last_sample_time(self) -> datetime | None:
        """When the latest sample was taken."""
        return as_utc((await self.conn.execute(select(func.max(history_samples.c.sampled_at)))).scalar())

    async def take_sample(self, now: datetime, reported_since: datetime) -> None:
        """Record the jobs Matched or Running now, per group and per (group, owner), with those
        other systems reported running since `reported_since`."""
        sample_id = (
            await self.conn.execute(insert(history_samples).values(sampled_at=now).returning(history_samples.c.id))
        ).scalar_one()
        counts: Counter[tuple[str, str]] = Counter()
        own = await self.conn.execute(
            select(jobs.c.owner_group, jobs.c.owner, func.count())
            .where(jobs.c.status.in_(sorted(HOLDING_A_SLOT)))
            .group_by(jobs.c.owner_group, jobs.c.owner)
        )
        reported = await self.conn.execute(
            select(reported_running.c.owner_group, reported_running.c.owner, reported_running.c.running).where(
                reported_running.c.reported_at >= reported_since
            )
        )
        for group, owner, running in [*own, *reported]:
            counts[group, owner] += running
        rows = sample_rows(sample_id, [(group, owner, n) for (group, owner), n in counts.items() if n > 0])
        if rows:
            await self.conn.execute(insert(running_samples), rows)

    async def prune_samples(self, before: datetime) -> None:
        """Delete the samples taken before `before` (their counts go with them)."""
        await self.conn.execute(delete(history_samples).where(history_samples.c.sampled_at < before))

    async def average_running(self, group: str | None, since: datetime) -> dict[str, float]:
        """Average running jobs since `since`: per group (group=None) or per owner of `group`."""
        in_span = history_samples.c.sampled_at >= since
        samples = (await self.conn.execute(select(func.count()).where(in_span))).scalar_one()
        if samples == 0:
            return {}
        if group is None:
            entity = running_samples.c.owner_group
            which = running_samples.c.owner == GROUP_LEVEL
        else:
            entity = running_samples.c.owner
            which = (running_samples.c.owner_group == group) & (running_samples.c.owner != GROUP_LEVEL)
        totals = await self.conn.execute(
            select(entity, func.sum(running_samples.c.running))
            .join(history_samples, history_samples.c.id == running_samples.c.sample_id)
            .where(in_span, which)
            .group_by(entity)
        )
        return {name: float(total) / samples for name, total in totals}

    async def running_history(self, since: datetime) -> list[tuple[datetime, str, int]]:
        """Each sample since `since`, oldest first, with its running jobs per group; a sample
        with nothing running appears once with the group ''."""
        stmt = (
            select(history_samples.c.sampled_at, func.coalesce(running_samples.c.owner_group, ""),
                   func.coalesce(running_samples.c.running, 0))
            .outerjoin(running_samples, (running_samples.c.sample_id == history_samples.c.id)
                       & (running_samples.c.owner == GROUP_LEVEL))
            .where(history_samples.c.sampled_at >= since)
            .order_by(history_samples.c.sampled_at)
        )  # fmt: skip
        return [(as_utc(at), group, int(n)) for at, group, n in (await self.conn.execute(stmt)).all()]

    async def latest_running(self, samples: int) -> list[tuple[datetime, str, int]]:
        """The latest `samples` samples (all, when there are fewer), as `running_history` reads them."""
        oldest = (
            await self.conn.execute(
                select(history_samples.c.sampled_at)
                .order_by(history_samples.c.sampled_at.desc())
                .offset(samples - 1)
                .limit(1)
            )
        ).scalar()
        return await self.running_history(as_utc(oldest) if oldest is not None else EPOCH)


class PostgresRunningSampleDB(PostgresStatements, RunningSampleDB, dialect="postgresql"):
    pass


class SQLiteRunningSampleDB(SQLiteStatements, RunningSampleDB, dialect="sqlite"):
    pass
