"""The counts the database gauges show (`fairmatch_group_jobs`, `fairmatch_jobs`, ...)."""

from __future__ import annotations

from sqlalchemy import func, select

from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.tables import jobs, task_queues, tq_jobs
from fairmatch.jobs.lifecycle import HOLDING_A_SLOT


class GaugeDB(AreaDB):
    """Jobs and task queues counted for the gauges, read when Prometheus scrapes."""

    async def waiting_per_group(self) -> dict[str, int]:
        """Waiting jobs per owner group."""
        tq = task_queues
        return dict(
            (await self.conn.execute(
                select(tq.c.owner_group, func.count())
                .select_from(tq_jobs.join(tq, tq.c.id == tq_jobs.c.tq_id))
                .group_by(tq.c.owner_group)
            )).all()
        )  # fmt: skip

    async def holding_per_group_and_status(self) -> dict[tuple[str, str], int]:
        """Jobs holding a slot per (owner group, status: Matched or Running)."""
        rows = (await self.conn.execute(
            select(jobs.c.owner_group, jobs.c.status, func.count())
            .where(jobs.c.status.in_(sorted(HOLDING_A_SLOT)))
            .group_by(jobs.c.owner_group, jobs.c.status)
        )).all()  # fmt: skip
        return {(group, str(status)): n for group, status, n in rows}

    async def jobs_per_status(self) -> dict[str, int]:
        """Jobs per status."""
        return dict((await self.conn.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status))).all())

    async def task_queue_count(self) -> int:
        """Task queues, with waiting jobs or not yet swept."""
        return (await self.conn.execute(select(func.count()).select_from(task_queues))).scalar_one()


class PostgresGaugeDB(PostgresStatements, GaugeDB, dialect="postgresql"):
    pass


class SQLiteGaugeDB(SQLiteStatements, GaugeDB, dialect="sqlite"):
    pass
