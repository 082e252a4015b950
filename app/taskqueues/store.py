"""Task-queue SQL: find-or-create, queue and unqueue jobs, delete empty queues, read.

Race rules (PostgreSQL, READ COMMITTED):
- find-or-create inserts with ON CONFLICT DO NOTHING in hash order (no
  deadlock between two batches), then reads the ids back FOR SHARE: a TQ
  that a transaction is filling cannot be deleted under it;
- delete-if-empty locks the TQ FOR UPDATE SKIP LOCKED (a TQ being filled is
  simply skipped), then deletes it only if no job is left; the foreign key
  from tq_jobs turns any remaining race into an error, never a lost job.
On SQLite every writing transaction holds the database write lock
(BEGIN IMMEDIATE), which serialises all of this.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, exists, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.clock import as_utc
from app.db.dialect import (
    change_time,
    database_now,
    insert_ignoring_conflicts,
    is_postgresql,
)
from app.db.tables import MULTI_VALUE_FIELDS, task_queues, tq_jobs, tq_values
from app.taskqueues import changes
from app.taskqueues.requirements import Requirements, levels_of, stored_levels

CHUNK = 1000  # rows per multi-row statement: well under every driver's parameter limit

# For the moment between a TQ's creation and its group's refresh.
INITIAL_PRIORITY = 1.0


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def find_or_create(
    conn: AsyncConnection, requirements: Iterable[Requirements], now: datetime
) -> tuple[dict[str, int], set[str]]:
    """The TQ id of each distinct requirement set, and the hashes of those it created.

    Must run inside the caller's transaction, which then holds the TQs
    against deletion until it commits.
    """
    wanted = {r.hash: r for r in requirements}
    found: dict[str, int] = {}
    new: set[str] = set()
    for _ in range(10):  # each round only repeats for TQs deleted in between
        missing = sorted(set(wanted) - set(found))
        if not missing:
            return found, new
        created = await _insert_new(conn, [wanted[h] for h in missing], now)
        await _insert_values(conn, [(created[h], wanted[h]) for h in created])
        new.update(created)
        found.update(await _lock_existing(conn, missing))
    raise RuntimeError("task queues kept disappearing while being looked up")


async def _insert_new(
    conn: AsyncConnection, reqs: Sequence[Requirements], now: datetime
) -> dict[str, int]:
    stmt = insert_ignoring_conflicts(conn, task_queues, "requirements_hash").returning(
        task_queues.c.requirements_hash, task_queues.c.id
    )
    created: dict[str, int] = {}
    for part in chunks(reqs):
        rows = [
            {
                "requirements_hash": r.hash,
                "owner": r.owner,
                "owner_group": r.owner_group,
                "vo": r.vo,
                "cpu_time": r.cpu_time,
                "priority_class": r.priority_class,
                "job_class": r.job_class,
                "priority": INITIAL_PRIORITY,
                "levels": [],
                "created_at": now,
                "changed_at": change_time(conn),
                **{field: list(r.values(field)) for field in MULTI_VALUE_FIELDS},
            }
            for r in part
        ]
        result = await conn.execute(stmt.values(rows))
        created.update({h: i for h, i in result.all()})
    return created


async def _insert_values(conn: AsyncConnection, new_tqs: Sequence[tuple[int, Requirements]]) -> None:
    for field in MULTI_VALUE_FIELDS:
        rows = [{"tq_id": tq_id, "value": v} for tq_id, r in new_tqs for v in r.values(field)]
        for part in chunks(rows):
            await conn.execute(tq_values[field].insert(), list(part))


async def _lock_existing(conn: AsyncConnection, hashes: Sequence[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for part in chunks(hashes):
        stmt = select(task_queues.c.requirements_hash, task_queues.c.id).where(
            task_queues.c.requirements_hash.in_(part)
        )
        if is_postgresql(conn):
            stmt = stmt.with_for_update(read=True)
        found.update({h: i for h, i in (await conn.execute(stmt)).all()})
    return found


async def delete_if_empty(conn: AsyncConnection, tq_id: int) -> bool:
    """Delete the TQ if it holds no job, in its own transaction. True if deleted."""
    try:
        async with conn.begin():
            if is_postgresql(conn):
                lock = (
                    select(task_queues.c.id)
                    .where(task_queues.c.id == tq_id)
                    .with_for_update(skip_locked=True)
                )
                if (await conn.execute(lock)).first() is None:
                    return False  # gone, or being filled right now
            result = await conn.execute(
                delete(task_queues).where(
                    task_queues.c.id == tq_id,
                    ~exists().where(tq_jobs.c.tq_id == tq_id),
                )
            )
            deleted = result.rowcount > 0
        if deleted:
            changes.bump()
        return deleted
    except IntegrityError:
        return False  # a job arrived after all: the TQ stays


async def delete_all_empty(conn: AsyncConnection) -> int:
    """Sweep: delete every TQ without jobs. Returns how many went."""
    async with conn.begin():
        empty = (
            await conn.execute(
                select(task_queues.c.id).where(~exists().where(tq_jobs.c.tq_id == task_queues.c.id))
            )
        ).scalars().all()
    deleted = 0
    for tq_id in empty:
        deleted += await delete_if_empty(conn, tq_id)
    return deleted


async def queued(conn: AsyncConnection, arrivals: Mapping[int, Counter[float]], *, new_jobs: bool) -> None:
    """Record committed jobs that entered TQs, per level, in a transaction of its own.

    New jobs are added to their level's count. Jobs coming back (a lapsed
    match) were never subtracted when they left, so they only make a missing
    level appear. Either way the row's `changed_at` moves, which is how
    matchers in other processes hear of the jobs. Rows are locked in id
    order, so two of these never deadlock.
    """
    if not arrivals:
        return
    async with conn.begin():
        await _count_arrivals(conn, arrivals, new_jobs)
    changes.bump()


async def _count_arrivals(conn: AsyncConnection, arrivals: Mapping[int, Counter[float]], new_jobs: bool) -> None:
    ids = sorted(arrivals)
    levels_read = select(task_queues.c.id, task_queues.c.levels).where(task_queues.c.id.in_(ids))
    if is_postgresql(conn):
        levels_read = levels_read.order_by(task_queues.c.id).with_for_update(key_share=True)
    stored = dict((await conn.execute(levels_read)).all())
    rows = []
    for tq_id in ids:
        levels = levels_of(stored.get(tq_id))
        for level, jobs in arrivals[tq_id].items():
            if new_jobs:
                levels[level] = levels.get(level, 0) + jobs
            elif levels.get(level, 0) <= 0:
                levels[level] = jobs
        rows.append({"tq": tq_id, "levels": stored_levels(levels)})
    await conn.execute(
        update(task_queues)
        .where(task_queues.c.id == bindparam("tq"))
        .values(levels=bindparam("levels"), changed_at=change_time(conn)),
        rows,
    )


# what matching keeps of a TQ (not how its priority was made: that is large, and for people)
_MATCHING_COLUMNS = [
    task_queues.c[name]
    for name in ("id", "requirements_hash", "owner", "owner_group", "vo", "cpu_time", "priority_class",
                 "priority", "levels", "changed_at", *MULTI_VALUE_FIELDS)
]  # fmt: skip


async def changed_since(conn: AsyncConnection, since: datetime | None) -> tuple[datetime, list[Any]]:
    """The database's time now, and every TQ changed after `since` (all without it),
    with the columns matching reads. Must run inside the caller's (read) transaction.
    """
    now = await database_now(conn)
    stmt = select(*_MATCHING_COLUMNS)
    if since is not None:
        stmt = stmt.where(task_queues.c.changed_at > since)
    return now, (await conn.execute(stmt)).all()


async def all_ids(conn: AsyncConnection) -> set[int]:
    """Every TQ's id. Inside the caller's transaction."""
    return set((await conn.execute(select(task_queues.c.id))).scalars())


async def latest_change(conn: AsyncConnection) -> datetime | None:
    """The latest `changed_at` of any TQ (one index probe). Inside the caller's transaction."""
    return (await conn.execute(select(func.max(task_queues.c.changed_at)))).scalar()


async def read_task_queues(
    conn: AsyncConnection, ids: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """TQs as the API shows them: keys, priority, waiting-job count and value lists.

    Must run inside the caller's (read) transaction.
    """
    counts = select(tq_jobs.c.tq_id, func.count().label("jobs")).group_by(tq_jobs.c.tq_id)
    stmt = select(task_queues).order_by(task_queues.c.id)
    if ids is not None:
        counts = counts.where(tq_jobs.c.tq_id.in_(ids))
        stmt = stmt.where(task_queues.c.id.in_(ids))
    counts = counts.subquery()
    stmt = stmt.add_columns(func.coalesce(counts.c.jobs, 0).label("jobs")).outerjoin(
        counts, counts.c.tq_id == task_queues.c.id
    )
    tqs = {row.id: _tq_dict(row) for row in await conn.execute(stmt)}
    if not tqs:
        return []
    for field in MULTI_VALUE_FIELDS:
        table = tq_values[field]
        values = select(table.c.tq_id, table.c.value).order_by(table.c.tq_id, table.c.value)
        if ids is not None:
            values = values.where(table.c.tq_id.in_(list(tqs)))
        for tq_id, value in await conn.execute(values):
            if tq_id in tqs:
                tqs[tq_id][field].append(value)
    return list(tqs.values())


def _tq_dict(row: Any) -> dict[str, Any]:
    return {
        "task_queue_id": row.id,
        "owner": row.owner,
        "owner_group": row.owner_group,
        "vo": row.vo,
        "cpu_time": row.cpu_time,
        "priority_class": row.priority_class,
        "job_class": row.job_class,
        "priority": row.priority,
        "priority_origin": row.priority_origin,
        "jobs": row.jobs,
        **{field: [] for field in MULTI_VALUE_FIELDS},
        "created_at": as_utc(row.created_at),
    }
