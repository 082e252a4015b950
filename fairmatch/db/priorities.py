"""Priority SQL: groups, the running-job history, what the priority loop reads and writes,
its runs, and the counts the database gauges show."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import Select, Text, bindparam, cast, delete, exists, func, insert, select, update

from fairmatch.auth.policy import JobScope
from fairmatch.clock import as_utc
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements, chunks
from fairmatch.db.change_signal import mark_changed
from fairmatch.db.tables import (
    groups,
    history_samples,
    jobs,
    priority_runs,
    reported_running,
    running_samples,
    task_queues,
    tq_jobs,
)
from fairmatch.jobs.lifecycle import HOLDING_A_SLOT
from fairmatch.priority.corrections import UNCORRECTED, ShareCorrections
from fairmatch.priority.dirac import GroupPolicy
from fairmatch.priority.history import GROUP_LEVEL, sample_rows
from fairmatch.priority.rank import RankGroup
from fairmatch.taskqueues.matching_fields import AMOUNT_FIELDS
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS, load_of, stored_levels

# transaction-scoped advisory locks: one priority loop, one history sampler at a time
PRIORITY_LOCK = 7_100_001
SAMPLER_LOCK = 7_100_002


def _group(row: Any) -> dict[str, Any]:
    return {
        "name": row.name,
        "job_share": row.job_share,
        "properties": sorted(row.properties),
        "job_sharing": row.job_sharing,
        "allow_background_tqs": row.allow_background_tqs,
        "priority": row.priority,
        "description": row.description,
        "configured": True,
    }


def per_level() -> Select:
    """The waiting jobs per (TQ, level): their number and the lowest job id (ids grow with
    submission: the oldest waiting job)."""
    return select(tq_jobs.c.tq_id, tq_jobs.c.real_priority, func.count(), func.min(tq_jobs.c.job_id)).group_by(
        tq_jobs.c.tq_id, tq_jobs.c.real_priority
    )


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # before any sample


class PriorityDB(AreaDB):
    """Groups, running-job samples, task-queue priorities and the priority runs."""

    # --- groups ------------------------------------------------------------------------------

    async def create_missing_groups(self, rows: list[dict[str, Any]]) -> None:
        """Insert the groups (rows with `name`) the table lacks; existing ones keep their values."""
        await self.conn.execute(self.insert_ignoring_conflicts(groups, "name"), rows)

    async def all_groups(self, visible: frozenset[str] | None = None) -> list[dict[str, Any]]:
        """All groups by name; `visible` (when not None) restricts them to those names."""
        query = select(groups).order_by(groups.c.name)
        if visible is not None:
            query = query.where(groups.c.name.in_(sorted(visible)))
        return [_group(row) for row in (await self.conn.execute(query)).all()]

    async def queued_groups(self, visible: frozenset[str] | None = None) -> list[str]:
        """The owner groups of the task queues (their waiting jobs), by name; `visible` as above."""
        query = select(task_queues.c.owner_group).distinct().order_by(task_queues.c.owner_group)
        if visible is not None:
            query = query.where(task_queues.c.owner_group.in_(sorted(visible)))
        return list((await self.conn.execute(query)).scalars())

    async def delete_group(self, name: str) -> bool:
        """Delete a group's configuration; whether it existed. In a `changing` transaction."""
        gone = (await self.conn.execute(delete(groups).where(groups.c.name == name))).rowcount > 0
        if gone:
            mark_changed(self.conn)
        return gone

    async def group(self, name: str) -> dict[str, Any] | None:
        """One group, or None."""
        row = (await self.conn.execute(select(groups).where(groups.c.name == name))).first()
        return None if row is None else _group(row)

    async def put_group(self, name: str, values: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create or replace a group: (the stored group, created?). In a `changing` transaction."""
        # Insert-or-nothing first, then update: on PostgreSQL a concurrent creator
        # makes the insert wait and do nothing, so two PUTs of a new group never
        # collide; on SQLite BEGIN IMMEDIATE serialises them.
        insert_new = self.insert_ignoring_conflicts(groups, "name").values(name=name, **values)
        created = (await self.conn.execute(insert_new.returning(groups.c.name))).first() is not None
        if not created:
            await self.conn.execute(update(groups).where(groups.c.name == name).values(**values))
        row = (await self.conn.execute(select(groups).where(groups.c.name == name))).one()
        mark_changed(self.conn)
        return _group(row), created

    async def sharing_groups(self) -> frozenset[str]:
        """Groups with JOB_SHARING (matched by group alone)."""
        return frozenset(
            (await self.conn.execute(select(groups.c.name).where(groups.c.job_sharing.is_(True)))).scalars()
        )

    async def group_policies(self) -> dict[str, GroupPolicy]:
        """What the dirac policy needs of each group."""
        rows = await self.conn.execute(
            select(groups.c.name, groups.c.job_share, groups.c.job_sharing, groups.c.allow_background_tqs)
        )
        return {name: GroupPolicy(share, sharing, background) for name, share, sharing, background in rows}

    async def rank_groups(self) -> dict[str, RankGroup]:
        """What the rank policy needs of each group."""
        rows = await self.conn.execute(select(groups.c.name, groups.c.job_share, groups.c.priority))
        return {name: RankGroup(job_share=share, priority=level) for name, share, level in rows}

    async def group_levels(self) -> dict[str, int]:
        """Each group's priority level."""
        return dict((await self.conn.execute(select(groups.c.name, groups.c.priority))).all())

    async def group_shares(self) -> dict[str, float]:
        """Each group's configured share."""
        return dict((await self.conn.execute(select(groups.c.name, groups.c.job_share))).all())

    # --- running-job history -----------------------------------------------------------------

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

    # --- task-queue priorities ---------------------------------------------------------------

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

    # --- priority runs -----------------------------------------------------------------------

    async def record_run(self, run: dict[str, Any], corrections: ShareCorrections) -> tuple[int, dict[str, Any]]:
        """Store one run (priority_runs columns) with the share corrections it applied, which
        its report keeps beside what the policy reported; its id and its report as stored."""
        report = {**run["report"], **_corrections_report(corrections)}
        stmt = insert(priority_runs).values(**{**run, "report": report}).returning(priority_runs.c.id)
        return (await self.conn.execute(stmt)).scalar_one(), report

    async def prune_runs(self, newest_id: int, keep: int) -> None:
        """Delete all runs but the `keep` up to `newest_id`."""
        await self.conn.execute(delete(priority_runs).where(priority_runs.c.id <= newest_id - keep))

    async def last_run_finished(self) -> datetime | None:
        """When the latest run finished."""
        return as_utc((await self.conn.execute(select(func.max(priority_runs.c.finished_at)))).scalar())

    async def latest_run(self) -> dict[str, Any] | None:
        """The latest run: who ran it, when, over how many TQs, and its report."""
        # the report as its text, decoded here with orjson: a run over 10,000 TQs writes
        # megabytes, which the driver's json module took some 60 ms to read
        pr = priority_runs
        stmt = select(pr.c.runner, pr.c.started_at, pr.c.finished_at, pr.c.task_queues, cast(pr.c.report, Text))
        row = (await self.conn.execute(stmt.order_by(pr.c.id.desc()).limit(1))).first()
        if row is None:
            return None
        return {
            "runner": row.runner,
            "started_at": as_utc(row.started_at),
            "finished_at": as_utc(row.finished_at),
            "task_queues": row.task_queues,
            "report": orjson.loads(row[4]),
        }

    async def latest_corrections(self) -> ShareCorrections:
        """The share corrections the latest run applied (none before the first run)."""
        report = await self.latest_report()
        return UNCORRECTED if report is None else _corrections_of(report)

    async def latest_report(self) -> dict[str, Any] | None:
        """The latest run's report alone."""
        return (
            await self.conn.execute(select(priority_runs.c.report).order_by(priority_runs.c.id.desc()).limit(1))
        ).scalar()

    # --- what the gauges show ----------------------------------------------------------------

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


def _corrections_report(corrections: ShareCorrections) -> dict[str, Any]:
    """The corrections as a run's report keeps them (GET /shares shows the first two keys)."""
    return {
        "corrections_enabled": corrections.enabled,
        "corrections": dict(corrections.explained),
        "correction_factors": {
            "groups": dict(corrections.groups),
            "owners": [[group, owner, factor] for (group, owner), factor in sorted(corrections.owners.items())],
        },
    }


def _corrections_of(report: dict[str, Any]) -> ShareCorrections:
    """The corrections kept in a run's report (`_corrections_report`)."""
    factors = report.get("correction_factors") or {}  # runs recorded before the factors were kept have none
    return ShareCorrections(
        enabled=report.get("corrections_enabled", False),
        groups=dict(factors.get("groups", {})),
        owners={(group, owner): factor for group, owner, factor in factors.get("owners", [])},
        explained=report.get("corrections", {}),
    )


class PostgresPriorityDB(PostgresStatements, PriorityDB, dialect="postgresql"):
    pass


class SQLitePriorityDB(SQLiteStatements, PriorityDB, dialect="sqlite"):
    pass
