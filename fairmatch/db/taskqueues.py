"""Task-queue SQL: find-or-create, count arrivals, delete empty queues, read.

Race rules (PostgreSQL, READ COMMITTED):
- find-or-create inserts with ON CONFLICT DO NOTHING in hash order (no
  deadlock between two batches), then reads the ids back FOR SHARE: a TQ
  that a transaction is filling cannot be deleted under it. The creation
  of one requirement set is serialised by an advisory lock on its hash, so
  that concurrent creators never both draw an id: new TQs take consecutive
  ids in the order they are created, as DIRAC's do;
- delete-if-empty locks the TQ FOR UPDATE SKIP LOCKED (a TQ being filled is
  simply skipped), then deletes it only if no job is left; the foreign key
  from tq_jobs turns any remaining race into an error, never a lost job.
On SQLite every writing transaction holds the database write lock
(BEGIN IMMEDIATE), which serialises all of this.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ARRAY, String, any_, bindparam, delete, exists, func, select, update

from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements, chunks, model_of
from fairmatch.db.change_signal import mark_changed
from fairmatch.db.tables import task_queues, tq_jobs
from fairmatch.taskqueues.matching_fields import AMOUNT_FIELDS, MATCHED_AMOUNTS
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS, Requirements, levels_of, stored_levels
from fairmatch.taskqueues.views import TaskQueue

# For the moment between a TQ's creation and its group's refresh.
INITIAL_PRIORITY = 1.0

# what matching keeps of a TQ (not how its priority was made: that is large, and for people)
_MATCHING_COLUMNS = [
    task_queues.c[name]
    for name in ("id", "requirements_hash", "owner", "owner_group", "vo", "cpu_time", "priority_class",
                 *MATCHED_AMOUNTS, "priority", "shareless", "levels", "changed_at", *MULTI_VALUE_FIELDS)
]  # fmt: skip
# of those, what changes once a TQ exists (its id and hash name requirements that never do)
_STATE_COLUMNS = [
    task_queues.c[name] for name in ("id", "requirements_hash", "priority", "shareless", "levels", "changed_at")
]


class TaskQueueDB(AreaDB):
    """The task queues: their keys and value lists, priorities and per-level job counts."""

    async def find_or_create(
        self, requirements: Iterable[Requirements], now: datetime
    ) -> tuple[dict[str, int], set[str]]:
        """The TQ id of each distinct requirement set, and the hashes of those it created.

        The caller's transaction then holds the TQs against deletion until it commits.
        """
        wanted = {r.hash: r for r in requirements}
        found: dict[str, int] = {}
        new: set[str] = set()
        for _ in range(10):  # each round only repeats for TQs deleted or created by others in between
            # most of a submission's TQs exist: find them first, and build an INSERT only for the rest
            found.update(await self._lock_existing(sorted(set(wanted) - set(found))))
            missing = sorted(set(wanted) - set(found))
            if not missing:
                return found, new
            created = await self._insert_new([wanted[h] for h in missing], now)
            new.update(created)
            found.update(created)
        raise RuntimeError("task queues kept disappearing while being looked up")

    async def _insert_new(self, reqs: Sequence[Requirements], now: datetime) -> dict[str, int]:
        """Insert the TQs no one has made yet; their hashes and new ids."""
        stmt = self.insert_ignoring_conflicts(task_queues, "requirements_hash").returning(
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
                    "account": r.account,
                    **{name: r.amount(name) for name in AMOUNT_FIELDS},
                    "priority": INITIAL_PRIORITY,
                    "levels": [],
                    "created_at": now,
                    "changed_at": self.change_time(),
                    **{field: list(r.values(field)) for field in MULTI_VALUE_FIELDS},
                }
                for r in part
            ]
            result = await self.conn.execute(stmt.values(rows))
            created.update({h: i for h, i in result.all()})
        return created

    async def _lock_existing(self, hashes: Sequence[str]) -> dict[str, int]:
        """The ids of the TQs with these hashes, held against deletion (on SQLite by the
        transaction's write lock alone; PostgreSQL locks the rows)."""
        found: dict[str, int] = {}
        for part in chunks(hashes):
            stmt = select(task_queues.c.requirements_hash, task_queues.c.id).where(
                task_queues.c.requirements_hash.in_(part)
            )
            found.update({h: i for h, i in (await self.conn.execute(stmt)).all()})
        return found

    async def delete_if_empty(self, tq_id: int) -> bool:
        """Delete the TQ if it holds no job and no one is filling it. True if deleted.

        Raises no change signal: a matcher's copy needs no catch-up for it. A copy
        still holding a deleted TQ loses one claim on it, finds it empty and passes it
        over, as every other process's copy does until its sweep of ids; and the
        claim that took a TQ's last job already took it out of its own process's copy.
        Catching up on each deletion read every TQ changed within the poll's margin
        again, once per deleted TQ."""
        if not await self._free(tq_id):
            return False
        result = await self.conn.execute(
            delete(task_queues).where(task_queues.c.id == tq_id, ~exists().where(tq_jobs.c.tq_id == tq_id))
        )
        return result.rowcount > 0

    async def _free(self, tq_id: int) -> bool:
        """Whether the TQ may be deleted now (SQLite: the write lock already says so)."""
        return True

    async def empty_ids(self, unchanged_for: timedelta) -> list[int]:
        """The ids of the TQs without jobs whose row has not changed for `unchanged_for`
        (by the clock `change_time` writes with, the same for every replica)."""
        unchanged_since = await self.database_now() - unchanged_for
        stmt = select(task_queues.c.id).where(
            ~exists().where(tq_jobs.c.tq_id == task_queues.c.id), task_queues.c.changed_at < unchanged_since
        )
        return list((await self.conn.execute(stmt)).scalars())

    async def count_arrivals(self, arrivals: Mapping[int, Counter[float]], *, new_jobs: bool) -> None:
        """Add jobs that entered TQs to their levels' counts (rows locked in id order).

        New jobs add to their level's count. Jobs coming back (a lapsed match)
        were never subtracted when they left, so they only make a missing level
        appear. Either way `changed_at` moves: other processes' matchers hear of it, and
        this one's once the `changing` transaction commits.
        """
        ids = sorted(arrivals)
        stmt = self.tq_rows_locked(select(task_queues.c.id, task_queues.c.levels).where(task_queues.c.id.in_(ids)))
        stored = dict((await self.conn.execute(stmt)).all())
        rows = []
        for tq_id in ids:
            levels = levels_of(stored.get(tq_id))
            for level, jobs in arrivals[tq_id].items():
                if new_jobs:
                    levels[level] = levels.get(level, 0) + jobs
                elif levels.get(level, 0) <= 0:
                    levels[level] = jobs
            rows.append({"tq": tq_id, "levels": stored_levels(levels)})
        await self.conn.execute(
            update(task_queues)
            .where(task_queues.c.id == bindparam("tq"))
            .values(levels=bindparam("levels"), changed_at=self.change_time()),
            rows,
        )
        mark_changed(self.conn)

    async def changed_since(self, since: datetime | None, *, whole: bool = True) -> tuple[datetime, list[Any]]:
        """The database's time now, and every TQ changed after `since` (all without it):
        with every column matching reads, or without `whole` only those that change
        (`matching_rows` reads the rest)."""
        now = await self.database_now()
        stmt = select(*(_MATCHING_COLUMNS if whole else _STATE_COLUMNS))
        if since is not None:
            stmt = stmt.where(task_queues.c.changed_at > since)
        return now, list((await self.conn.execute(stmt)).all())

    async def matching_rows(self, ids: Sequence[int]) -> list[Any]:
        """These TQs (those that exist) with every column matching reads."""
        rows: list[Any] = []
        for part in chunks(sorted(ids)):
            rows.extend((await self.conn.execute(select(*_MATCHING_COLUMNS).where(task_queues.c.id.in_(part)))).all())
        return rows

    async def all_ids(self) -> set[int]:
        """Every TQ's id."""
        return set((await self.conn.execute(select(task_queues.c.id))).scalars())

    async def latest_change(self) -> datetime | None:
        """The latest `changed_at` of any TQ (one index probe)."""
        return (await self.conn.execute(select(func.max(task_queues.c.changed_at)))).scalar()

    async def read(self, ids: Sequence[int] | None = None) -> list[TaskQueue]:
        """TQs (all, or these) as the API shows them, by id."""
        per_tq = select(tq_jobs.c.tq_id, func.count().label("jobs")).group_by(tq_jobs.c.tq_id)
        stmt = select(task_queues).order_by(task_queues.c.id)
        if ids is not None:
            per_tq = per_tq.where(tq_jobs.c.tq_id.in_(ids))
            stmt = stmt.where(task_queues.c.id.in_(ids))
        counts = per_tq.subquery()
        stmt = stmt.add_columns(func.coalesce(counts.c.jobs, 0).label("jobs")).outerjoin(
            counts, counts.c.tq_id == task_queues.c.id
        )
        return [_task_queue_of(row) for row in await self.conn.execute(stmt)]


class PostgresTaskQueueDB(PostgresStatements, TaskQueueDB, dialect="postgresql"):
    async def _insert_new(self, reqs: Sequence[Requirements], now: datetime) -> dict[str, int]:
        # one creator per requirement set at a time (locks in hash order, held to the commit):
        # an insert that lost the race on the unique hash would still have drawn an id
        hashes = sorted({r.hash for r in reqs})
        for h in hashes:
            await self.conn.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(h, 0))))
        made = task_queues.c.requirements_hash.in_(hashes)
        present = set((await self.conn.execute(select(task_queues.c.requirements_hash).where(made))).scalars())
        missing = [r for r in reqs if r.hash not in present]
        return await super()._insert_new(missing, now) if missing else {}  # the others: found on the next round

    async def _lock_existing(self, hashes: Sequence[str]) -> dict[str, int]:
        # One statement, rows locked in id order (the sort runs before the locks): the
        # order priority runs update TQs in, so a submission and a run never wait on
        # each other in a cycle (in hash order, they deadlocked under load).
        h = task_queues.c.requirements_hash
        stmt = (
            select(h, task_queues.c.id)
            .where(h == any_(bindparam("hashes", type_=ARRAY(String))))
            .order_by(task_queues.c.id)
            .with_for_update(read=True)
        )
        return {hash_: tq_id for hash_, tq_id in await self.conn.execute(stmt, {"hashes": list(hashes)})}

    async def _free(self, tq_id: int) -> bool:
        lock = select(task_queues.c.id).where(task_queues.c.id == tq_id).with_for_update(skip_locked=True)
        return (await self.conn.execute(lock)).first() is not None  # else gone, or being filled


class SQLiteTaskQueueDB(SQLiteStatements, TaskQueueDB, dialect="sqlite"):
    pass


def _task_queue_of(row: Any) -> TaskQueue:
    lists = {field: getattr(row, field) or [] for field in MULTI_VALUE_FIELDS}  # none stored: empty
    return model_of(TaskQueue, row, task_queue_id=row.id, **lists)
