"""Bulk-action SQL: the jobs a selection names, and set-based changes of one batch of them.

Every batch is changed in the caller's transaction, the rows locked in the order a
claim locks them (the tq_jobs rows first, then the jobs rows, in id order), so that
a batch and a claim never wait on each other in a cycle and no table is locked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, update

from fairmatch.auth.policy import JobScope
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.jobs import listed
from fairmatch.db.tables import job_specs, jobs, tq_jobs
from fairmatch.jobs.filters import JobFilter


class BulkDB(AreaDB):
    """Jobs selected and changed by the batch."""

    async def selected(
        self, filters: JobFilter, job_ids: Sequence[int] | None, *, after_id: int, limit: int, scope: JobScope
    ) -> list[tuple[int, str]]:
        """(id, status) of up to `limit` jobs after `after_id` in id order, within the scope,
        passing the filters and, when given, among `job_ids`."""
        stmt = select(jobs.c.id, jobs.c.status).where(*listed(filters, after_id=after_id, scope=scope))
        if job_ids is not None:
            stmt = stmt.where(jobs.c.id.in_(sorted(job_ids)))
        return [(row.id, row.status) for row in await self.conn.execute(stmt.order_by(jobs.c.id).limit(limit))]

    async def unqueue(self, job_ids: Sequence[int]) -> dict[int, int]:
        """Take these jobs out of their task queues: {job id: the TQ it was in}, for those queued."""
        stmt = delete(tq_jobs).where(tq_jobs.c.job_id.in_(sorted(job_ids))).returning(tq_jobs.c.job_id, tq_jobs.c.tq_id)
        return {row.job_id: row.tq_id for row in await self.conn.execute(stmt)}

    async def lock(self, job_ids: Sequence[int]) -> dict[int, Any]:
        """Lock these jobs rows in id order: {id: (status, task_queue_id, user_priority,
        priority_class, account, requirements)}."""
        stmt = (
            select(jobs.c.id, jobs.c.status, jobs.c.task_queue_id, jobs.c.user_priority, jobs.c.priority_class,
                   jobs.c.account, job_specs.c.requirements)
            .join(job_specs, job_specs.c.job_id == jobs.c.id)
            .where(jobs.c.id.in_(sorted(job_ids)))
            .order_by(jobs.c.id)
            .with_for_update(of=jobs)
        )  # fmt: skip
        return {row.id: row for row in await self.conn.execute(stmt)}

    async def set_values(self, job_ids: Iterable[int], **values: Any) -> None:
        """Set these columns on these (locked) jobs."""
        ids = sorted(job_ids)
        if ids:
            await self.conn.execute(update(jobs).where(jobs.c.id.in_(ids)).values(**values))

    async def queue(self, rows: Sequence[dict[str, Any]]) -> None:
        """Queue jobs again: rows of job_id, tq_id, user_priority, real_priority; each job's
        task_queue_id follows."""
        if not rows:
            return
        await self.conn.execute(insert(tq_jobs), list(rows))
        await self.conn.execute(
            update(jobs).where(jobs.c.id == bindparam("job")).values(task_queue_id=bindparam("queue")),
            [{"job": row["job_id"], "queue": row["tq_id"]} for row in rows],
        )


class PostgresBulkDB(PostgresStatements, BulkDB, dialect="postgresql"):
    pass


class SQLiteBulkDB(SQLiteStatements, BulkDB, dialect="sqlite"):
    pass
