"""Retention SQL: the finished jobs, events, request ids and pilots past their time, in
batches, and the record of purge runs.

Each batch is meant for its own short transaction. On PostgreSQL the rows are
selected with FOR UPDATE SKIP LOCKED: a row a claim or a status report holds is
left for the next run instead of making either side wait. On SQLite (no row
locks) the clause is not rendered; the batch's BEGIN IMMEDIATE serialises it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, delete, func, insert, or_, select, tuple_, update

from fairmatch.clock import as_utc
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.tables import job_events, job_specs, jobs, match_requests, pilots, purge_runs

# transaction-scoped advisory lock: two replicas never both record a run as started
PURGE_LOCK = 7_100_004


class RetentionDB(AreaDB):
    """The purge's statements and its run record."""

    async def finished_jobs(self, status: str, before: datetime, limit: int) -> list[int]:
        """Up to `limit` jobs in final `status` finished before `before`, oldest first, locked
        for deletion (rows others hold are skipped)."""
        stmt = (
            select(jobs.c.id)
            .where(jobs.c.status == status, jobs.c.finished_at.isnot(None), jobs.c.finished_at < before)
            .order_by(jobs.c.finished_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return list((await self.conn.execute(stmt)).scalars())

    async def count_finished(self, status: str, before: datetime) -> int:
        """How many jobs in final `status` finished before `before` (a dry run's count)."""
        stmt = select(func.count()).where(
            jobs.c.status == status, jobs.c.finished_at.isnot(None), jobs.c.finished_at < before
        )
        return int((await self.conn.execute(stmt)).scalar_one())

    async def archive_records(self, job_ids: Sequence[int]) -> list[dict[str, Any]]:
        """Each job's row, its spec's requirements and payload, and its events in order."""
        stmt = (
            select(jobs, job_specs.c.requirements, job_specs.c.payload)
            .outerjoin(job_specs, job_specs.c.job_id == jobs.c.id)
            .where(jobs.c.id.in_(job_ids))
            .order_by(jobs.c.id)
        )
        rows = (await self.conn.execute(stmt)).mappings().all()
        event_rows = await self.conn.execute(
            select(job_events.c.job_id, job_events.c.status, job_events.c.minor_status, job_events.c.at,
                   job_events.c.source, job_events.c.by)
            .where(job_events.c.job_id.in_(job_ids))
            .order_by(job_events.c.job_id, job_events.c.id)
        )  # fmt: skip
        events: dict[int, list[dict[str, Any]]] = {}
        for event in event_rows.mappings():
            events.setdefault(event["job_id"], []).append(
                {str(k): as_utc(v) if k == "at" else v for k, v in event.items() if k != "job_id"}
            )
        records = []
        for row in rows:
            job = {str(c.name): row[c.name] for c in jobs.columns}  # str: the names are str subclasses
            records.append({"job": job, "requirements": row["requirements"], "payload": row["payload"],
                            "events": events.get(job["id"], [])})  # fmt: skip
        return records

    async def delete_jobs(self, job_ids: Sequence[int]) -> int:
        """Delete the jobs; their specs, events and request ids go with them (ON DELETE CASCADE)."""
        return (await self.conn.execute(delete(jobs).where(jobs.c.id.in_(job_ids)))).rowcount

    async def finished_after(
        self, status: str, after: tuple[datetime, int] | None, before: datetime, limit: int
    ) -> list[tuple[datetime, int]]:
        """(finished_at, id) of up to `limit` jobs in `status` finished before `before` and
        after the position `after` (None: from the first), in that order."""
        stmt = select(jobs.c.finished_at, jobs.c.id).where(
            jobs.c.status == status, jobs.c.finished_at.isnot(None), jobs.c.finished_at < before
        )
        if after is not None:
            stmt = stmt.where(tuple_(jobs.c.finished_at, jobs.c.id) > after)
        rows = await self.conn.execute(stmt.order_by(jobs.c.finished_at, jobs.c.id).limit(limit))
        return [(as_utc(at), job_id) for at, job_id in rows]

    async def delete_events(self, job_ids: Sequence[int]) -> int:
        """Delete the jobs' events (found through the jobs, by the events' job index)."""
        return (await self.conn.execute(delete(job_events).where(job_events.c.job_id.in_(job_ids)))).rowcount

    async def delete_request_ids(self, before: datetime, limit: int) -> int:
        """Delete up to `limit` request ids recorded before `before`: they replay no more."""
        mr = match_requests
        old = (
            select(mr.c.requester, mr.c.request_id)
            .where(mr.c.created_at < before)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return (await self.conn.execute(delete(mr).where(tuple_(mr.c.requester, mr.c.request_id).in_(old)))).rowcount

    async def delete_pilots(self, before: datetime, limit: int) -> int:
        """Delete up to `limit` pilots last seen before `before`."""
        old = select(pilots.c.reference).where(pilots.c.last_seen < before).limit(limit)
        old = old.with_for_update(skip_locked=True)
        return (await self.conn.execute(delete(pilots).where(pilots.c.reference.in_(old)))).rowcount

    # --- the runs ------------------------------------------------------------------------------

    async def start_run(self, runner: str, started_at: datetime, *, running_since: datetime | None,
                        finished_since: datetime | None) -> int | None:  # fmt: skip
        """Record a run as started, unless another is: a run of another runner started at or
        after `running_since` and not finished (one of this runner's own, which runs one purge
        at a time, was cut short), or one finished at or after `finished_since` (None: not
        looked for). Its id, or None. The transaction-scoped lock makes the check and the
        insert one step across replicas."""
        pr = purge_runs
        conditions: list[ColumnElement[bool]] = []
        if running_since is not None:
            unfinished = pr.c.finished_at.is_(None) & (pr.c.runner != runner)
            conditions.append(unfinished & (pr.c.started_at >= running_since))
        if finished_since is not None:
            conditions.append(pr.c.finished_at >= finished_since)
        if not conditions:
            await self.leader_lock(PURGE_LOCK)
        elif not await self.try_leader_lock(PURGE_LOCK):
            return None
        if conditions and (await self.conn.execute(select(pr.c.id).where(or_(*conditions)).limit(1))).first():
            return None
        run = {"runner": runner, "started_at": started_at, "jobs": {}, "events": 0, "request_ids": 0, "pilots": 0,
               "archived": 0}  # fmt: skip
        return (await self.conn.execute(insert(pr).values(**run).returning(pr.c.id))).scalar_one()

    async def finish_run(self, run_id: int, outcome: dict[str, Any]) -> None:
        """Record what the run did (purge_runs columns, finished_at among them)."""
        await self.conn.execute(update(purge_runs).where(purge_runs.c.id == run_id).values(**outcome))

    async def prune_runs(self, newest_id: int, keep: int) -> None:
        """Delete all runs but the `keep` up to `newest_id`."""
        await self.conn.execute(delete(purge_runs).where(purge_runs.c.id <= newest_id - keep))

    async def last_run(self) -> dict[str, Any] | None:
        """The latest finished run: who ran it, when, what it deleted and archived, and its error."""
        pr = purge_runs
        stmt = select(pr).where(pr.c.finished_at.isnot(None)).order_by(pr.c.id.desc()).limit(1)
        row = (await self.conn.execute(stmt)).first()
        if row is None:
            return None
        return {
            "runner": row.runner,
            "started_at": as_utc(row.started_at),
            "finished_at": as_utc(row.finished_at),
            "jobs": row.jobs,
            "events": row.events,
            "request_ids": row.request_ids,
            "pilots": row.pilots,
            "archived": row.archived,
            "error": row.error,
            "indexes_rebuilt": row.indexes_rebuilt or [],
        }

    async def events_purged_before(self) -> datetime | None:
        """Where the latest events purge stopped: the events of jobs finished before it are gone."""
        stmt = select(func.max(purge_runs.c.events_before))
        return as_utc((await self.conn.execute(stmt)).scalar())


class PostgresRetentionDB(PostgresStatements, RetentionDB, dialect="postgresql"):
    pass


class SQLiteRetentionDB(SQLiteStatements, RetentionDB, dialect="sqlite"):
    pass
