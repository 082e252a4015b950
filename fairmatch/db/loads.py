"""Task queues' loads and priorities' SQL: what the priority loop reads (the waiting jobs
per queue and level) and writes (priorities and level counts), and what explains them."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from sqlalchemy import Select, bindparam, exists, func, select, update

from fairmatch.auth.policy import JobScope
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements, chunks
from fairmatch.db.change_signal import mark_changed
from fairmatch.db.tables import jobs, task_queues, tq_jobs
from fairmatch.taskqueues.matching_fields import AMOUNT_FIELDS
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS, load_of, stored_levels


def per_level() -> Select:
    """The waiting jobs per (TQ, level): their number and the lowest job id (ids grow with
    submission: the oldest waiting job)."""
    return select(tq_jobs.c.tq_id, tq_jobs.c.real_priority, func.count(), func.min(tq_jobs.c.job_id)).group_by(
        tq_jobs.c.tq_id, tq_jobs.c.real_priority
    )


class LoadDB(AreaDB):
    """The waiting jobs of each task queue, and the priorities and levels set from them."""

    async def waiting_members(self) -> set[tuple[str, str]]:
        """The (account, owner) pairs of the TQs with waiting jobs: an index probe per TQ,
        not the pass over every waiting job that `waiting_loads` makes."""
        tq = task_queues
        waiting = exists().where(tq_jobs.c.tq_id == tq.c.id)
        stmt = select(tq.c.account, tq.c.owner).where(waiting).distinct()
        return {(account, owner) for account, owner in await self.conn.execute(stmt)}

    async def waiting_loads(self, only_groups: Collection[str] | None = None) -> list[dict[str, Any]]:
        """Every TQ with waiting jobs: its definition, current priority and levels, and its jobs per level."""
        # One pass over the waiting jobs, grouped by (TQ, level): the averages and
        # sums the policies weigh with, and the level counts matching draws from.
        # The TQ rows and the oldest jobs are then read by key (a join would have
        # the planner repeat the pass in every parallel worker).
        tq = task_queues
        # Each TQ's version before the pass: set_priorities counts again the levels of
        # a TQ a submission counted jobs into after it (`changed_at` moved).
        versions = select(tq.c.id, tq.c.changed_at)
        if only_groups is not None:
            versions = versions.where(tq.c.owner_group.in_(sorted(only_groups)))
        levels_as_of = dict((await self.conn.execute(versions)).all())
        levels_query = per_level()
        if only_groups is not None:
            # filter before aggregating: the planner cannot push it through the GROUP BY
            in_groups = select(tq.c.id).where(tq.c.owner_group.in_(sorted(only_groups)))
            levels_query = levels_query.where(tq_jobs.c.tq_id.in_(in_groups))
        levels: dict[int, dict[float, int]] = {}
        oldest: dict[int, int] = {}
        for tq_id, level, jobs_at_level, first in await self.conn.execute(levels_query):
            levels.setdefault(tq_id, {})[float(level)] = int(jobs_at_level)
            oldest[tq_id] = min(first, oldest.get(tq_id, first))
        loads = []
        for part in chunks(sorted(levels)):
            submitted = dict(
                (await self.conn.execute(
                    select(jobs.c.id, jobs.c.submitted_at).where(jobs.c.id.in_([oldest[i] for i in part]))
                )).all()
            )  # fmt: skip
            rows = await self.conn.execute(
                select(
                    tq.c.id, tq.c.owner, tq.c.owner_group, tq.c.vo, tq.c.cpu_time, tq.c.priority_class,
                    tq.c.job_class, tq.c.account, *(tq.c[f] for f in (*AMOUNT_FIELDS, *MULTI_VALUE_FIELDS)),
                    tq.c.priority, tq.c.priority_origin, tq.c.levels.label("stored_levels"),
                ).where(tq.c.id.in_(part))
            )  # fmt: skip
            for row in rows:
                counts = levels[row.id]
                loads.append({**row._asdict(), "levels": counts, **load_of(counts),
                              "submitted_at": submitted[oldest[row.id]], "levels_as_of": levels_as_of.get(row.id)})  # fmt: skip
        return loads

    async def set_priorities(self, changes: list[dict[str, Any]]) -> None:
        """Write each change's `priority`, `origin`, `shareless` and `levels` to its TQ (`tq`), in id order.
        In a `changing` transaction.

        The TQs are locked first; one whose `changed_at` is no longer `levels_as_of` (a
        submission counted jobs into it after waiting_loads counted) has its levels counted
        again under the lock, so that the write loses none of them.
        """
        tq = task_queues
        versions: dict[int, Any] = {}
        for part in chunks([change["tq"] for change in changes]):
            locked = self.tq_rows_locked(select(tq.c.id, tq.c.changed_at).where(tq.c.id.in_(part)))
            versions.update((await self.conn.execute(locked)).all())
        moved = [change["tq"] for change in changes if versions.get(change["tq"]) != change["levels_as_of"]]
        recounted = await self._level_counts(moved)
        rows = [
            {**change, "levels": stored_levels(recounted.get(change["tq"], {}))} if change["tq"] in moved else change
            for change in changes
        ]
        await self.conn.execute(
            update(tq)
            .where(tq.c.id == bindparam("tq"))
            .values(
                priority=bindparam("priority"),
                priority_origin=bindparam("origin"),
                shareless=bindparam("shareless"),
                levels=bindparam("levels"),
                changed_at=self.change_time(),
            ),
            rows,
        )
        mark_changed(self.conn)

    async def _level_counts(self, tq_ids: Sequence[int]) -> dict[int, dict[float, int]]:
        """The waiting jobs of these TQs per level (a TQ without any is absent)."""
        counts: dict[int, dict[float, int]] = {}
        for part in chunks(sorted(tq_ids)):
            for tq_id, level, jobs_at_level, _ in await self.conn.execute(per_level().where(tq_jobs.c.tq_id.in_(part))):
                counts.setdefault(tq_id, {})[float(level)] = int(jobs_at_level)
        return counts

    async def forget_drained_levels(self) -> int:
        """Empty the levels of TQs without jobs (claims do not subtract); how many were emptied.
        In a `changing` transaction of its own: its locks are taken in id order, as every
        writer of task queues takes them, and not after a priority run's, which would
        take two batches out of order and could wait in a cycle with a submission.

        The queues are locked first, then emptied by a second statement whose snapshot
        sees the jobs of a submission that held one of those locks and has since committed."""
        tq = task_queues
        drained = ~exists().where(tq_jobs.c.tq_id == tq.c.id)
        candidates = select(tq.c.id).where(func.json_array_length(tq.c.levels) > 0, drained)
        locked = list((await self.conn.execute(self.tq_rows_locked(candidates))).scalars())
        emptied = 0
        for part in chunks(locked):
            result = await self.conn.execute(
                update(tq).where(tq.c.id.in_(part), drained).values(levels=[], changed_at=self.change_time())
            )
            emptied += result.rowcount
        if emptied:
            mark_changed(self.conn)
        return emptied

    async def queue_priorities(self, task_queue_id: int | None, scope: JobScope) -> dict[int, Any]:
        """TQs (one, or all) within the owner scope, by id: keys, priority class, priority, origin."""
        tq = task_queues
        stmt = select(
            tq.c.id, tq.c.owner, tq.c.owner_group, tq.c.account, tq.c.priority_class, tq.c.priority,
            tq.c.priority_origin,
        )  # fmt: skip
        if task_queue_id is not None:
            stmt = stmt.where(tq.c.id == task_queue_id)
        if scope.owner is not None:
            stmt = stmt.where(tq.c.owner == scope.owner)
        if scope.owner_groups is not None:
            stmt = stmt.where(tq.c.owner_group.in_(sorted(scope.owner_groups)))
        return {row.id: row for row in await self.conn.execute(stmt.order_by(tq.c.id))}

    async def waiting_jobs(self, tq_ids: Iterable[int], limit: int) -> list[Any]:
        """The tq_jobs rows of these TQs, lowest job ids first."""
        stmt = select(tq_jobs).where(tq_jobs.c.tq_id.in_(list(tq_ids))).order_by(tq_jobs.c.job_id).limit(limit)
        return list((await self.conn.execute(stmt)).all())


class PostgresLoadDB(PostgresStatements, LoadDB, dialect="postgresql"):
    pass


class SQLiteLoadDB(SQLiteStatements, LoadDB, dialect="sqlite"):
    pass
