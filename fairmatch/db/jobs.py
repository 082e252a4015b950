"""Jobs SQL: the jobs table, their places in task queues (tq_jobs) and their events.

Lock order, everywhere: a job's tq_jobs row before its jobs row (the claim
takes them in that order), so a claim and a change of the same job never
deadlock.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select, update

from fairmatch.auth.policy import JobScope
from fairmatch.clock import as_utc
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements, chunks
from fairmatch.db.tables import job_events, jobs, match_requests, tq_jobs
from fairmatch.jobs.lifecycle import JobStatus
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS


class JobDB(AreaDB):
    """Jobs, where the waiting ones wait, and what happened to each."""

    async def insert_waiting(self, rows: list[dict[str, Any]], now: datetime) -> list[int]:
        """Waiting jobs (jobs columns plus `real_priority`), their tq_jobs rows and events; ids in order."""
        job_ids: list[int] = []
        job_columns = [{k: v for k, v in row.items() if k != "real_priority"} for row in rows]
        for part in chunks(job_columns):
            result = await self.conn.execute(
                insert(jobs).returning(jobs.c.id, sort_by_parameter_order=True), list(part)
            )
            job_ids.extend(result.scalars().all())
        waiting = [
            {
                "job_id": job_id,
                "tq_id": row["task_queue_id"],
                "user_priority": row["user_priority"],
                "real_priority": row["real_priority"],
            }
            for job_id, row in zip(job_ids, rows)
        ]
        for part in chunks(waiting):
            await self.conn.execute(insert(tq_jobs), list(part))
        await self.record_events(job_ids, JobStatus.Waiting, now, "submit")
        return job_ids

    async def record_events(
        self,
        job_ids: Sequence[int],
        status: JobStatus,
        now: datetime,
        source: str,
        minor_status: str | None = None,
    ) -> None:
        """One event per job."""
        events = [
            {"job_id": j, "status": status.value, "minor_status": minor_status, "at": now, "source": source}
            for j in job_ids
        ]
        for part in chunks(events):
            await self.conn.execute(insert(job_events), list(part))

    async def get(self, job_id: int) -> Any | None:
        """The jobs row, or None."""
        return (await self.conn.execute(select(jobs).where(jobs.c.id == job_id))).first()

    async def page(
        self,
        *,
        status: JobStatus | None,
        owner: str | None,
        owner_group: str | None,
        after_id: int,
        limit: int,
        scope: JobScope,
    ) -> Sequence[Any]:
        """Up to `limit` rows after `after_id` in id order, within the scope and filters."""
        stmt = select(jobs).where(jobs.c.id > after_id).order_by(jobs.c.id).limit(limit)
        if scope.owner is not None:
            stmt = stmt.where(jobs.c.owner == scope.owner)
        if scope.owner_groups is not None:
            stmt = stmt.where(jobs.c.owner_group.in_(sorted(scope.owner_groups)))
        if scope.matched_by is not None:
            stmt = stmt.where(jobs.c.matched_by == scope.matched_by)
        if status is not None:
            stmt = stmt.where(jobs.c.status == status.value)
        if owner is not None:
            stmt = stmt.where(jobs.c.owner == owner)
        if owner_group is not None:
            stmt = stmt.where(jobs.c.owner_group == owner_group)
        return (await self.conn.execute(stmt)).all()

    async def lock_state(self, job_id: int) -> Any | None:
        """The job's status, owner, group, matcher, lease, last report and reschedules, its row locked;
        None if missing."""
        return (
            await self.conn.execute(
                select(
                    jobs.c.status,
                    jobs.c.owner,
                    jobs.c.owner_group,
                    jobs.c.matched_by,
                    jobs.c.lease_expires_at,
                    jobs.c.heartbeat_at,
                    jobs.c.reschedules,
                )
                .where(jobs.c.id == job_id)
                .with_for_update()
            )
        ).first()

    async def lock_whole(self, job_id: int) -> Any | None:
        """The whole jobs row, locked; None if missing."""
        return (await self.conn.execute(select(jobs).where(jobs.c.id == job_id).with_for_update())).first()

    async def update(self, job_id: int, **values: Any) -> Any:
        """Set these columns; the row after."""
        return (await self.conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values).returning(jobs))).one()

    async def requeue_facts(self, job_id: int) -> Any:
        """The requirements and user priority a job is queued again with."""
        return (
            await self.conn.execute(select(jobs.c.requirements, jobs.c.user_priority).where(jobs.c.id == job_id))
        ).one()

    async def forget_match_request(self, job_id: int) -> None:
        """Void the job's match: a late replay of its request id must not return it."""
        await self.conn.execute(delete(match_requests).where(match_requests.c.job_id == job_id))

    async def add_waiting(self, job_id: int, tq_id: int, user_priority: int, level: float) -> None:
        """Queue the job in a TQ at a level."""
        await self.conn.execute(
            insert(tq_jobs).values(job_id=job_id, tq_id=tq_id, user_priority=user_priority, real_priority=level)
        )

    async def move_waiting(self, job_id: int, tq_id: int, user_priority: int, level: float) -> None:
        """Point the job's (locked) tq_jobs row at another TQ and level."""
        await self.conn.execute(
            update(tq_jobs)
            .where(tq_jobs.c.job_id == job_id)
            .values(tq_id=tq_id, user_priority=user_priority, real_priority=level)
        )

    async def remove_waiting(self, job_id: int) -> int | None:
        """Take the job out of its TQ; the TQ it was in, or None."""
        return (
            await self.conn.execute(delete(tq_jobs).where(tq_jobs.c.job_id == job_id).returning(tq_jobs.c.tq_id))
        ).scalar()

    async def lock_waiting(self, job_id: int) -> int | None:
        """Lock the job's tq_jobs row; the TQ it waits in, or None when it is not waiting."""
        return (
            await self.conn.execute(select(tq_jobs.c.tq_id).where(tq_jobs.c.job_id == job_id).with_for_update())
        ).scalar()

    async def lapsed_leases(self, now: datetime, limit: int) -> list[int]:
        """Matched jobs whose lease ran out by `now`, the oldest lease first."""
        return list(
            (
                await self.conn.execute(
                    select(jobs.c.id)
                    .where(jobs.c.status == JobStatus.Matched.value, jobs.c.lease_expires_at <= now)
                    .order_by(jobs.c.lease_expires_at)
                    .limit(limit)
                )
            ).scalars()
        )

    async def silent(self, status: JobStatus, silent_since: datetime, limit: int) -> list[int]:
        """Jobs in `status` (Running, Stalled) with no report since `silent_since`."""
        return list(
            (
                await self.conn.execute(
                    select(jobs.c.id)
                    .where(jobs.c.status == status.value, jobs.c.heartbeat_at <= silent_since)
                    .limit(limit)
                )
            ).scalars()
        )

    async def stall_if_silent(self, job_id: int, silent_since: datetime) -> bool:
        """Running -> Stalled, re-checked in the same statement: a report may have just come."""
        row = (
            await self.conn.execute(
                update(jobs)
                .where(
                    jobs.c.id == job_id,
                    jobs.c.status == JobStatus.Running.value,
                    jobs.c.heartbeat_at <= silent_since,
                )
                .values(status=JobStatus.Stalled.value, minor_status="no heartbeat")
                .returning(jobs.c.id)
            )
        ).first()
        return row is not None


class PostgresJobDB(PostgresStatements, JobDB, dialect="postgresql"):
    """Bulk submission with COPY instead of multi-row INSERTs.

    Inside the submission's transaction, on the driver's own connection: the job
    ids are taken from the jobs sequence first, then jobs, their tq_jobs rows and
    their events are streamed with COPY. A multi-row INSERT of 1,000 rows is a
    statement of 13,000 parameters that the driver rewrites and the server parses
    each time; COPY costs per row only the row.
    """

    async def insert_waiting(self, rows: list[dict[str, Any]], now: datetime) -> list[int]:
        raw = (await self.conn.get_raw_connection()).driver_connection
        assert raw is not None  # an open connection has its driver's
        async with raw.cursor() as cursor:
            await cursor.execute(_NEW_IDS, {"n": len(rows)})
            ids = sorted(r[0] for r in await cursor.fetchall())
            encoded: dict[int, str] = {}  # jobs of one submission share a few requirement sets
            async with cursor.copy(_COPY_JOBS) as copy:
                for job_id, row in zip(ids, rows):
                    key = id(row["requirements"])
                    if key not in encoded:
                        encoded[key] = json.dumps(row["requirements"])
                    payload = None if row["payload"] is None else json.dumps(row["payload"], ensure_ascii=False)
                    await copy.write_row((
                        job_id, JobStatus.Waiting.value, row["owner"], row["owner_group"], row["vo"], row["account"],
                        row["cpu_time"], encoded[key], row["user_priority"], row["priority_class"],
                        row["job_class"], payload, row["task_queue_id"], now,
                    ))  # fmt: skip
            async with cursor.copy(_COPY_WAITING) as copy:
                for job_id, row in zip(ids, rows):
                    await copy.write_row((job_id, row["task_queue_id"], row["user_priority"], row["real_priority"]))
            async with cursor.copy(_COPY_EVENTS) as copy:
                for job_id in ids:
                    await copy.write_row((job_id, JobStatus.Waiting.value, now, "submit"))
        return ids


class SQLiteJobDB(SQLiteStatements, JobDB, dialect="sqlite"):
    pass


_NEW_IDS = "SELECT nextval(pg_get_serial_sequence('jobs', 'id')) FROM generate_series(1, %(n)s)"
_COPY_JOBS = (
    "COPY jobs (id, status, owner, owner_group, vo, account, cpu_time, requirements, user_priority, "
    "priority_class, job_class, payload, task_queue_id, submitted_at) FROM STDIN"
)
_COPY_WAITING = "COPY tq_jobs (job_id, tq_id, user_priority, real_priority) FROM STDIN"
_COPY_EVENTS = "COPY job_events (job_id, status, at, source) FROM STDIN"


def job_dict(row: Any) -> dict[str, Any]:
    """A jobs row as the API shows it."""
    requirements = row.requirements or {}
    return {
        "job_id": row.id,
        "status": row.status,
        "minor_status": row.minor_status,
        "task_queue_id": row.task_queue_id if row.status == JobStatus.Waiting else None,
        "owner": row.owner,
        "owner_group": row.owner_group,
        "vo": row.vo,
        "account": row.account,
        "cpu_time": row.cpu_time,
        "cpu_bucket": requirements.get("cpu_time"),
        **{field: list(requirements.get(field, [])) for field in MULTI_VALUE_FIELDS},
        "user_priority": row.user_priority,
        "priority_class": row.priority_class,
        "job_class": row.job_class,
        "payload": row.payload,
        "site": row.site,
        "pilot_reference": row.pilot_reference,
        "submitted_at": as_utc(row.submitted_at),
        "matched_at": as_utc(row.matched_at),
        "lease_expires_at": as_utc(row.lease_expires_at),
        "started_at": as_utc(row.started_at),
        "heartbeat_at": as_utc(row.heartbeat_at),
        "finished_at": as_utc(row.finished_at),
        "reschedules": row.reschedules,
        "cpu_seconds": row.cpu_seconds,
        "wall_seconds": row.wall_seconds,
    }
