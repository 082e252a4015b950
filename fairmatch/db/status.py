"""Overview SQL (GET /status): job counts, match rate, busiest queues, last priority run.

Everything is read from the shared database, never from process memory, so
every replica answers with the same figures. SQLAlchemy Core only: the same
statements run on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func, select

from fairmatch.clock import as_utc
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.tables import job_events, jobs, priority_runs, status_in, task_queues, tq_jobs
from fairmatch.jobs.lifecycle import JobStatus

# the non-final states: where jobs are now, per group
ACTIVE = (JobStatus.Waiting, JobStatus.Held, JobStatus.Matched, JobStatus.Running, JobStatus.Stalled)
MATCH_WINDOWS = (60, 300)  # seconds


class StatusDB(AreaDB):
    """Read-only figures across the tables, for operators."""

    async def jobs_per_group(self, waiting: Mapping[str, int]) -> list[dict[str, Any]]:
        """One row per group with active jobs: how many are in each non-final state. The
        Waiting ones are `waiting`'s (counted from tq_jobs by `waiting`); the others,
        few beside them, are read through ix_jobs_status_id."""
        stmt = (
            select(jobs.c.owner_group, jobs.c.status, func.count())
            .where(status_in(s for s in ACTIVE if s is not JobStatus.Waiting))
            .group_by(jobs.c.owner_group, jobs.c.status)
        )
        counts: dict[str, dict[str, Any]] = {}

        def row_of(group: str) -> dict[str, Any]:
            return counts.setdefault(group, {"owner_group": group, **{s.lower(): 0 for s in ACTIVE}})

        for group, status, number in (await self.conn.execute(stmt)).all():
            row_of(group)[status.lower()] = int(number)
        for group, number in waiting.items():
            row_of(group)["waiting"] = number
        return [counts[name] for name in sorted(counts)]

    async def match_rate(self, now: datetime) -> list[dict[str, Any]]:
        """Matches (job_events rows with status Matched) in each window ending now."""
        since = {seconds: now - timedelta(seconds=seconds) for seconds in MATCH_WINDOWS}
        at = job_events.c.at
        stmt = select(*(func.coalesce(func.sum(case((at >= start, 1), else_=0)), 0) for start in since.values())).where(
            job_events.c.status == JobStatus.Matched.value, at >= min(since.values())
        )
        numbers = (await self.conn.execute(stmt)).one()
        return [
            {"window_seconds": seconds, "matches": int(n), "per_second": int(n) / seconds}
            for seconds, n in zip(since, numbers, strict=True)
        ]

    async def matches_per_minute(self, now: datetime, minutes: int) -> list[int]:
        """Matches in each of the last `minutes` whole minutes before `now`, oldest first (one
        pass over the recent matches of ix_job_events_status_at)."""
        starts = [now - timedelta(minutes=minutes - n) for n in range(minutes)]
        at = job_events.c.at
        counted = [
            func.coalesce(func.sum(case(((at >= start) & (at < start + timedelta(minutes=1)), 1), else_=0)), 0)
            for start in starts
        ]
        stmt = select(*counted).where(job_events.c.status == JobStatus.Matched.value, at >= starts[0])
        return [int(n) for n in (await self.conn.execute(stmt)).one()]

    async def waiting(self, top: int) -> tuple[dict[str, int], dict[str, int], list[dict[str, Any]]]:
        """The Waiting jobs per group, the longest CPU bucket of each group's, and the `top` task
        queues with the most of them (ties: lower id first): one pass over tq_jobs, which holds
        exactly the Waiting jobs and is narrower than the jobs table. Window functions hand back
        only each group's first queue, carrying the group's sum and bucket, and the top queues,
        not a row per queue."""
        waiting = select(tq_jobs.c.tq_id, func.count().label("jobs")).group_by(tq_jobs.c.tq_id).subquery("waiting")
        tq = task_queues
        ranked = (
            select(
                tq.c.id, tq.c.owner, tq.c.owner_group, tq.c.priority_class, tq.c.priority, waiting.c.jobs,
                func.sum(waiting.c.jobs).over(partition_by=tq.c.owner_group).label("group_jobs"),
                func.max(tq.c.cpu_time).over(partition_by=tq.c.owner_group).label("group_cpu"),
                func.row_number().over(partition_by=tq.c.owner_group, order_by=tq.c.id).label("in_group"),
                func.row_number().over(order_by=(waiting.c.jobs.desc(), tq.c.id)).label("rank"),
            )
            .join(waiting, waiting.c.tq_id == tq.c.id)
            .subquery("ranked")
        )  # fmt: skip
        rows = (await self.conn.execute(select(ranked).where((ranked.c.rank <= top) | (ranked.c.in_group == 1)))).all()
        per_group = {r.owner_group: int(r.group_jobs) for r in rows if r.in_group == 1}
        cpu_per_group = {r.owner_group: int(r.group_cpu) for r in rows if r.in_group == 1}
        busiest = [
            {"task_queue_id": r.id, "owner": r.owner, "owner_group": r.owner_group,
             "priority_class": r.priority_class, "priority": r.priority, "jobs": int(r.jobs)}
            for r in sorted((r for r in rows if r.rank <= top), key=lambda r: r.rank)
        ]  # fmt: skip
        return per_group, cpu_per_group, busiest

    async def last_priority_run(self) -> dict[str, Any] | None:
        """The latest run without its report (which can be large)."""
        pr = priority_runs
        stmt = select(pr.c.runner, pr.c.started_at, pr.c.finished_at, pr.c.policy, pr.c.task_queues)
        row = (await self.conn.execute(stmt.order_by(pr.c.id.desc()).limit(1))).first()
        if row is None:
            return None
        return {
            "runner": row.runner,
            "policy": row.policy,
            "started_at": as_utc(row.started_at),
            "finished_at": as_utc(row.finished_at),
            "task_queues": row.task_queues,
        }

    async def server_settings(self) -> dict[str, str]:
        """The database server's settings that fairmatch's promises rest on, as this session
        sees them (a database's or a role's own value included); none on SQLite."""
        return {}


# the settings `fairmatch.db.server_settings.DANGERS` names, as pg_settings spells their values
_SERVER_SETTINGS = "SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum', 'fsync', 'synchronous_commit')"


class PostgresStatusDB(PostgresStatements, StatusDB, dialect="postgresql"):
    async def server_settings(self) -> dict[str, str]:
        return {row.name: row.setting for row in (await self.conn.exec_driver_sql(_SERVER_SETTINGS)).all()}


class SQLiteStatusDB(SQLiteStatements, StatusDB, dialect="sqlite"):
    pass
