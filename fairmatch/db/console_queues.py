"""The console's task-queue SQL: one page of queues filtered, sorted and counted by the
database, then the waiting jobs of that page's queues alone.

A page never reads every queue's row: the filters, the order and the page's bounds
are the statement's (WHERE, ORDER BY, LIMIT/OFFSET), and its total is a COUNT.
Only a sort by waiting jobs or by the oldest waiting job counts the waiting jobs of
every queue (of those the filters keep), in one pass over tq_jobs: its cost grows with
the waiting jobs, about 30 ms per 200,000 on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, String, any_, exists, func, literal, select

from fairmatch.clock import as_utc
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements, chunks
from fairmatch.db.loads import per_level
from fairmatch.db.tables import jobs, task_queues, tq_jobs

SortKey = Literal["id", "owner", "group", "priority", "class", "jobs", "oldest"]

_LISTED = [task_queues.c[name] for name in ("id", "owner", "owner_group", "account", "priority_class", "priority",
                                            "sites")]  # fmt: skip
_COLUMN_OF: dict[str, ColumnElement[Any]] = {
    "id": task_queues.c.id,
    "owner": task_queues.c.owner,
    "group": task_queues.c.owner_group,
    "priority": task_queues.c.priority,
    "class": task_queues.c.priority_class,
}


@dataclass(frozen=True, slots=True)
class QueueListing:
    """Which queues a page lists, in which order, and which slice of them."""

    owner: str | None = None
    owner_group: str | None = None
    site: str | None = None
    platform: str | None = None
    tag: str | None = None
    # per column, the values a queue the caller sees has there (fairmatch.auth.policy.queue_restrictions)
    restrictions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    sort: SortKey = "id"
    descending: bool = False
    offset: int = 0
    limit: int = 50


@dataclass(frozen=True, slots=True)
class Level:
    """The waiting jobs of one queue at one user-priority level (its real priority)."""

    real_priority: float
    jobs: int
    oldest: datetime | None  # submission of the level's lowest job id (None: purged since it was counted)


@dataclass(slots=True)
class Waiting:
    """A queue's waiting jobs, per level, highest level first."""

    levels: list[Level] = field(default_factory=list)

    @property
    def jobs(self) -> int:
        return sum(level.jobs for level in self.levels)

    @property
    def oldest(self) -> datetime | None:
        return min((level.oldest for level in self.levels if level.oldest is not None), default=None)


class ConsoleQueueDB(AreaDB):
    """The task queues as the console lists them."""

    def _contains(self, values: ColumnElement[Any], value: str) -> ColumnElement[bool]:
        """Whether a value-list column holds `value` (each backend's own wording)."""
        raise NotImplementedError

    def _conditions(self, listing: QueueListing) -> list[ColumnElement[bool]]:
        tq = task_queues
        conditions: list[ColumnElement[bool]] = []
        if listing.owner is not None:
            conditions.append(tq.c.owner == listing.owner)
        if listing.owner_group is not None:
            conditions.append(tq.c.owner_group == listing.owner_group)
        for values, value in ((tq.c.sites, listing.site), (tq.c.platforms, listing.platform), (tq.c.tags, listing.tag)):
            if value is not None:
                conditions.append(self._contains(values, value))
        conditions += [tq.c[column].in_(sorted(values)) for column, values in listing.restrictions.items()]
        return conditions

    async def count(self, listing: QueueListing) -> int:
        """How many queues pass the listing's filters."""
        stmt = select(func.count()).select_from(task_queues).where(*self._conditions(listing))
        return (await self.conn.execute(stmt)).scalar_one()

    async def page(self, listing: QueueListing) -> list[Any]:
        """The listing's slice of queues (id, keys, priority, sites), in its order then by id."""
        tq = task_queues
        conditions = self._conditions(listing)
        stmt = select(*_LISTED).where(*conditions)
        if listing.sort in _COLUMN_OF:
            column = _COLUMN_OF[listing.sort]
            order = [column.desc() if listing.descending else column.asc()]
        else:
            # waiting jobs per queue, and its lowest waiting job id (ids grow with submission:
            # the longest-waiting job), in one pass over tq_jobs
            per_tq = select(tq_jobs.c.tq_id, func.count().label("jobs"), func.min(tq_jobs.c.job_id).label("first"))
            if conditions:  # filter before aggregating: the planner cannot push it through the GROUP BY
                per_tq = per_tq.where(tq_jobs.c.tq_id.in_(select(tq.c.id).where(*conditions)))
            waiting = per_tq.group_by(tq_jobs.c.tq_id).subquery()
            stmt = stmt.select_from(tq.outerjoin(waiting, waiting.c.tq_id == tq.c.id))
            if listing.sort == "jobs":
                jobs_waiting = func.coalesce(waiting.c.jobs, 0)
                order = [jobs_waiting.desc() if listing.descending else jobs_waiting.asc()]
            else:
                # by how long the oldest job has waited: descending is the lowest first job id;
                # a queue without waiting jobs has no age and comes last either way
                first = waiting.c.first
                order = [(first.asc() if listing.descending else first.desc()).nulls_last()]
        stmt = stmt.order_by(*order, tq.c.id).offset(listing.offset).limit(listing.limit)
        return list((await self.conn.execute(stmt)).all())

    async def waiting(self, tq_ids: Sequence[int]) -> dict[int, Waiting]:
        """The waiting jobs of these queues per level, each level with its oldest job's
        submission (a queue without waiting jobs is absent)."""
        firsts: dict[int, list[tuple[float, int, int]]] = {}
        for part in chunks(sorted(tq_ids)):
            for tq_id, level, jobs_at_level, first in await self.conn.execute(
                per_level().where(tq_jobs.c.tq_id.in_(part))
            ):
                firsts.setdefault(tq_id, []).append((float(level), int(jobs_at_level), first))
        submitted: dict[int, datetime] = {}
        for part in chunks(sorted(first for levels in firsts.values() for _, _, first in levels)):
            rows = await self.conn.execute(select(jobs.c.id, jobs.c.submitted_at).where(jobs.c.id.in_(part)))
            submitted.update((job_id, as_utc(at)) for job_id, at in rows)
        return {
            tq_id: Waiting(
                [Level(level, count, submitted.get(first)) for level, count, first in sorted(levels, reverse=True)]
            )
            for tq_id, levels in firsts.items()
        }


class PostgresConsoleQueueDB(PostgresStatements, ConsoleQueueDB, dialect="postgresql"):
    def _contains(self, values: ColumnElement[Any], value: str) -> ColumnElement[bool]:
        return literal(value, String) == any_(values)  # value lists are arrays


class SQLiteConsoleQueueDB(SQLiteStatements, ConsoleQueueDB, dialect="sqlite"):
    def _contains(self, values: ColumnElement[Any], value: str) -> ColumnElement[bool]:
        each = func.json_each(values).table_valued("value")  # value lists are JSON lists
        return exists(select(1).select_from(each).where(each.c.value == value))
