"""Jobs SQL: the jobs table and their specs, their places in task queues (tq_jobs) and their events.

Lock order, everywhere: a job's tq_jobs row before its jobs row (the claim
takes them in that order), so a claim and a change of the same job never
deadlock. A job's spec (job_specs) is written once with the job and only read
after: a read of the whole job joins it.

What a caller sees of the jobs is rendered in SQL once (`visible`): every
read and change of a job on a caller's behalf filters with it, so a job out of
the caller's scope is not found, nor locked.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Select, and_, bindparam, delete, false, insert, select, true, update
from sqlalchemy.dialects.postgresql import psycopg as postgresql_psycopg

from fairmatch.accounting.usage import charge_row
from fairmatch.auth.policy import JobScope
from fairmatch.clock import as_utc
from fairmatch.db.accounting import AccountingDB, charge_insert
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements, chunks, model_of
from fairmatch.db.batches import Batches
from fairmatch.db.raw import Row
from fairmatch.db.tables import job_events, job_specs, jobs, match_requests, status_in, tq_jobs
from fairmatch.jobs.filters import JobFilter, JobOrder
from fairmatch.jobs.lifecycle import FINAL, NO_HEARTBEAT, JobStatus
from fairmatch.jobs.reports import OutOfBounds, UsedTime, processors_of
from fairmatch.jobs.transition import REPORTED_COLUMNS, ReportTransition
from fairmatch.jobs.views import Job
from fairmatch.taskqueues.matching_fields import AMOUNT_FIELDS
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS, Requirements, requeued

# a job's spec, beside its jobs row wherever the whole job is read
_SPEC = (job_specs.c.requirements, job_specs.c.payload)
_WHOLE = jobs.join(job_specs, job_specs.c.job_id == jobs.c.id)


def _whole_job() -> Select[Any]:
    return select(jobs, *_SPEC).select_from(_WHOLE)


def _named_values(scope: JobScope) -> dict[str, dict[str, str]]:
    """Per restricted jobs column, the values the scope allows there, by parameter name."""
    return {
        column: {f"scope_{column}_{i}": value for i, value in enumerate(sorted(values))}
        for column, values in scope.restrictions().items()
    }


def _one_of(named: dict[str, dict[str, Any]]) -> ColumnElement[bool]:
    return and_(
        true(),
        *(jobs.c[column].in_([bindparam(name, value) for name, value in by_name.items()]) if by_name else false()
          for column, by_name in named.items()),
    )  # fmt: skip


def filtered(filters: JobFilter) -> list[ColumnElement[bool]]:
    """The conditions of a listing's filters (all must hold): their one rendering in SQL."""
    c = jobs.c
    conditions = [column == value for column, value in (
        (c.owner, filters.owner), (c.owner_group, filters.owner_group), (c.account, filters.account),
        (c.site, filters.site), (c.task_queue_id, filters.task_queue_id),
    ) if value is not None]  # fmt: skip
    if filters.status:
        conditions.append(c.status.in_(sorted(status.value for status in filters.status)))
    if filters.since is not None:
        conditions.append(c.submitted_at >= filters.since)
    if filters.until is not None:
        conditions.append(c.submitted_at < filters.until)
    return conditions


def listed(
    filters: JobFilter, *, after_id: int | None, scope: JobScope, order: JobOrder = JobOrder.oldest
) -> list[ColumnElement[bool]]:
    """The jobs a listing's page takes, past `after_id` in `order` (None: from the first): within
    the scope, passing the filters. With `in_order`, the one rule of the listings' keyset pages."""
    past = [] if after_id is None else [jobs.c.id < after_id if order is JobOrder.newest else jobs.c.id > after_id]
    return [*past, visible(scope), *filtered(filters)]


def in_order(order: JobOrder) -> ColumnElement[Any]:
    return jobs.c.id.desc() if order is JobOrder.newest else jobs.c.id.asc()


def visible(scope: JobScope) -> ColumnElement[bool]:
    """The jobs the scope sees: the one rendering of a caller's scope in SQL."""
    return _one_of(_named_values(scope))


@lru_cache(maxsize=64)
def _visible_text(shape: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    """`visible` as PostgreSQL text: it depends only on the parameters' names, not on their values."""
    named: dict[str, dict[str, Any]] = {column: dict.fromkeys(names) for column, names in shape}
    return str(_one_of(named).compile(dialect=postgresql_psycopg.dialect()))


def _visible_sql(scope: JobScope) -> tuple[str, dict[str, str]]:
    """`visible` for a statement sent as text: its SQL and its parameters."""
    named = _named_values(scope)
    shape = tuple((column, tuple(by_name)) for column, by_name in named.items())
    return _visible_text(shape), {name: value for by_name in named.values() for name, value in by_name.items()}


@dataclass(frozen=True, slots=True)
class StatusReport:
    """A pilot's status report to one job: its transition, the time it says was used, and who reports."""

    job_id: int
    transition: ReportTransition
    used: UsedTime  # the CPU and wall seconds reported, which physics bounds
    by: str  # the caller's identity


class Reported(NamedTuple):
    """What a status report found: the job's status before (None: no such job in the
    caller's scope) and the whole job after (None: the transition was refused)."""

    before: JobStatus | None
    job: Any | None
    out_of_bounds: OutOfBounds | None = None  # why the report's used time was refused (nothing changed)


class JobDB(AreaDB):
    """Jobs, where the waiting ones wait, and what happened to each."""

    async def insert_waiting(self, rows: list[dict[str, Any]], now: datetime, *, by: str) -> list[int]:
        """Waiting jobs (jobs columns, `requirements`, `payload` and `real_priority`), their specs,
        tq_jobs rows and events (submitted `by` a caller); ids in order."""
        job_ids: list[int] = []
        job_columns = [{k: v for k, v in row.items() if k in jobs.c} for row in rows]
        for part in chunks(job_columns):
            result = await self.conn.execute(
                insert(jobs).returning(jobs.c.id, sort_by_parameter_order=True), list(part)
            )
            job_ids.extend(result.scalars().all())
        specs = [
            {"job_id": job_id, "requirements": row["requirements"], "payload": row["payload"]}
            for job_id, row in zip(job_ids, rows)
        ]
        for part in chunks(specs):
            await self.conn.execute(insert(job_specs), list(part))
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
        await self.record_events(job_ids, JobStatus.Waiting, now, "submit", by=by)
        return job_ids

    async def record_events(
        self,
        job_ids: Sequence[int],
        status: JobStatus,
        now: datetime,
        source: str,
        minor_status: str | None = None,
        *,
        by: str,
    ) -> None:
        """One event per job, `by` the caller who acted (SYSTEM for the service's own loops)."""
        events = [
            {"job_id": j, "status": status.value, "minor_status": minor_status, "at": now, "source": source, "by": by}
            for j in job_ids
        ]
        for part in chunks(events):
            await self.conn.execute(insert(job_events), list(part))

    async def get(self, job_id: int, scope: JobScope) -> Any | None:
        """The whole job (its jobs row and its spec), or None when the scope does not see it."""
        return (await self.conn.execute(_whole_job().where(jobs.c.id == job_id, visible(scope)))).first()

    async def history(self, job_id: int, scope: JobScope) -> Sequence[Any] | None:
        """The job's events in the order they were recorded; None when the scope does not see the job."""
        if (await self.conn.execute(select(jobs.c.id).where(jobs.c.id == job_id, visible(scope)))).first() is None:
            return None
        e = job_events.c
        stmt = select(e.at, e.status, e.minor_status, e.source, e.by).where(e.job_id == job_id).order_by(e.id)
        return (await self.conn.execute(stmt)).all()

    async def page(
        self,
        filters: JobFilter,
        *,
        after_id: int | None,
        limit: int,
        scope: JobScope,
        order: JobOrder = JobOrder.oldest,
    ) -> Sequence[Any]:
        """Up to `limit` whole jobs past `after_id` in `order`, within the scope and filters."""
        stmt = _whole_job().where(*listed(filters, after_id=after_id, scope=scope, order=order))
        return (await self.conn.execute(stmt.order_by(in_order(order)).limit(limit))).all()

    async def lock_state(self, job_id: int, scope: JobScope) -> Any | None:
        """The job's status, owner, group, matcher, match time, lease, last report and reschedules, its row locked;
        None if missing or out of the scope."""
        return (
            await self.conn.execute(
                select(
                    jobs.c.status,
                    jobs.c.owner,
                    jobs.c.owner_group,
                    jobs.c.matched_by,
                    jobs.c.matched_at,
                    jobs.c.lease_expires_at,
                    jobs.c.heartbeat_at,
                    jobs.c.reschedules,
                )
                .where(jobs.c.id == job_id, visible(scope))
                .with_for_update()
            )
        ).first()

    async def lock_whole(self, job_id: int, scope: JobScope | None = None) -> Any | None:
        """The whole job, its jobs row locked; None if missing (or out of the scope)."""
        stmt = _whole_job().where(jobs.c.id == job_id).with_for_update(of=jobs)
        if scope is not None:
            stmt = stmt.where(visible(scope))
        return (await self.conn.execute(stmt)).first()

    async def by_external_id(self, external_id: str, scope: JobScope) -> Any | None:
        """The whole job holding the external id, else the newest that held it; None when none
        is in the scope."""
        stmt = _whole_job().where(jobs.c.external_id == external_id, visible(scope)).order_by(jobs.c.id.desc())
        return (await self.conn.execute(stmt.limit(1))).first()

    async def replace_holders(self, external_ids: Sequence[str], now: datetime, *, by: str) -> list[Any]:
        """Free these external ids for new jobs: their Waiting and Held holders leave their queues
        and end Killed. Answers the holders that cannot give up their id (Matched, Running,
        Stalled): when there are any, the caller rolls back."""
        unfinished = status_in(set(JobStatus) - FINAL)
        for part in chunks(external_ids):
            holding = select(jobs.c.id).where(jobs.c.external_id.in_(part), unfinished)
            # tq_jobs rows first, as the claim takes them: a claim under way keeps its job
            await self.conn.execute(delete(tq_jobs).where(tq_jobs.c.job_id.in_(holding.scalar_subquery())))
        holders: list[Any] = []
        for part in chunks(external_ids):
            stmt = select(jobs.c.id, jobs.c.status, jobs.c.external_id).where(jobs.c.external_id.in_(part), unfinished)
            holders += (await self.conn.execute(stmt.with_for_update())).all()
        busy = [h for h in holders if h.status not in (JobStatus.Waiting, JobStatus.Held)]
        replaced = [h.id for h in holders if h.status in (JobStatus.Waiting, JobStatus.Held)]
        if busy or not replaced:
            return busy
        minor = "Replaced by a new job of its external id"
        for part in chunks(replaced):
            await self.conn.execute(
                update(jobs)
                .where(jobs.c.id.in_(part))
                .values(status=JobStatus.Killed.value, minor_status=minor, finished_at=now, lease_expires_at=None)
            )
        await self.record_events(replaced, JobStatus.Killed, now, "replace", minor, by=by)
        return []

    async def update(self, job_id: int, **values: Any) -> Any:
        """Set these jobs columns; the whole job after (its spec read, never written)."""
        after = (
            await self.conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values).returning(*jobs.c))
        ).one()
        spec = (await self.conn.execute(select(*_SPEC).where(job_specs.c.job_id == job_id))).one()
        return Row({**after._asdict(), **spec._asdict()})

    async def requirements_of(self, job_id: int) -> dict[str, Any]:
        """The requirements a job was submitted with, as its spec stores them."""
        stmt = select(job_specs.c.requirements).where(job_specs.c.job_id == job_id)
        return dict((await self.conn.execute(stmt)).scalar_one() or {})

    async def requeue_facts(self, job_id: int) -> tuple[Requirements, int]:
        """The requirements and user priority a job is queued again with: its spec's requirements
        in the priority class it has now (a change of class does not rewrite the spec)."""
        row = (
            await self.conn.execute(
                select(job_specs.c.requirements, jobs.c.priority_class, jobs.c.account, jobs.c.user_priority)
                .select_from(_WHOLE)
                .where(jobs.c.id == job_id)
            )
        ).one()
        return requeued(row.requirements, row.priority_class, row.account), row.user_priority

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
        # the status as the partial index's predicate words it, so that any plan may use the index
        return list(
            (
                await self.conn.execute(
                    select(jobs.c.id)
                    .where(status_in({JobStatus.Matched}), jobs.c.lease_expires_at <= now)
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
                .values(status=JobStatus.Stalled.value, minor_status=NO_HEARTBEAT)
                .returning(jobs.c.id)
            )
        ).first()
        return row is not None

    async def report(self, report: StatusReport, scope: JobScope, batches: Batches) -> Reported:
        """Take a status report in a transaction of its own: under the row lock, the job takes
        the report's transition from the status it is in, if it may."""
        transition = report.transition
        async with self.conn.begin():
            locked = await self.lock_state(report.job_id, scope)
            if locked is None:
                return Reported(None, None)
            before = JobStatus(locked.status)
            if before not in transition.taken_from:
                return Reported(before, None)
            if report.used.cpu_seconds is not None or report.used.wall_seconds is not None:
                tags = (await self.requirements_of(report.job_id)).get("tags", ())
                problem = report.used.problem(as_utc(locked.matched_at), processors_of(tags))
                if problem is not None:
                    return Reported(before, None, problem)
            job = await self.update(report.job_id, **transition.values(before))
            if transition.writes_event(before):
                await self.record_events(
                    [report.job_id], transition.status, transition.at, "api", transition.minor_status, by=report.by
                )
            amount = transition.charge(job.cpu_seconds)
            if amount is not None:
                await AccountingDB.of(self.conn).log_charge(charge_row(job, amount, transition.at))
        return Reported(before, job)


class PostgresJobDB(PostgresStatements, JobDB, dialect="postgresql"):
    """Bulk submission with COPY instead of multi-row INSERTs.

    Inside the submission's transaction, on the driver's own connection: the job
    ids are taken from the jobs sequence first, then jobs, their tq_jobs rows and
    their events are streamed with COPY. A multi-row INSERT of 1,000 rows is a
    statement of 13,000 parameters that the driver rewrites and the server parses
    each time; COPY costs per row only the row.
    """

    async def insert_waiting(self, rows: list[dict[str, Any]], now: datetime, *, by: str) -> list[int]:
        raw = (await self.conn.get_raw_connection()).driver_connection
        assert raw is not None  # an open connection has its driver's
        async with raw.cursor() as cursor:
            await cursor.execute(_NEW_IDS, {"n": len(rows)})
            ids = sorted(r[0] for r in await cursor.fetchall())
            async with cursor.copy(_COPY_JOBS) as copy:
                for job_id, row in zip(ids, rows):
                    await copy.write_row((
                        job_id, JobStatus.Waiting.value, row["owner"], row["owner_group"], row["vo"], row["account"],
                        row["cpu_time"], row["user_priority"], row["priority_class"], row["job_class"],
                        row["task_queue_id"], now, row.get("external_id"),
                    ))  # fmt: skip
            encoded: dict[int, str] = {}  # jobs of one submission share a few requirement sets
            async with cursor.copy(_COPY_SPECS) as copy:
                for job_id, row in zip(ids, rows):
                    key = id(row["requirements"])
                    if key not in encoded:
                        encoded[key] = json.dumps(row["requirements"])
                    payload = None if row["payload"] is None else json.dumps(row["payload"], ensure_ascii=False)
                    await copy.write_row((job_id, encoded[key], payload))
            async with cursor.copy(_COPY_WAITING) as copy:
                for job_id, row in zip(ids, rows):
                    await copy.write_row((job_id, row["task_queue_id"], row["user_priority"], row["real_priority"]))
            async with cursor.copy(_COPY_EVENTS) as copy:
                for job_id in ids:
                    await copy.write_row((job_id, JobStatus.Waiting.value, now, "submit", by))
        return ids

    async def report(self, report: StatusReport, scope: JobScope, batches: Batches) -> Reported:
        """One autocommitted statement (`_report_sql`) on the driver's connection, sharing a round
        trip and a commit with the process's concurrent claims and reports, when the report
        carries what the job is charged; otherwise the charge is the CPU seconds the job
        stored before, read under the row lock in a transaction."""
        transition = report.transition
        if transition.needs_stored_cpu_seconds or not report.used.fits_one_processor():
            return await super().report(report, scope, batches)
        where, scope_params = _visible_sql(scope)
        # in this process's next batch of hot statements (fairmatch/db/batches.py)
        row: Any = await batches.run(self.conn, _report_sql(where), {
            **_transition_params(transition), "job_id": report.job_id, "by": report.by,
            "latest_match": report.used.latest_match(), **scope_params,
        })  # fmt: skip
        assert row is not None, "the statement answers one row, found or not"
        before = None if row.status_before is None else JobStatus(row.status_before)
        if row.id is None and before is not None and before in transition.taken_from:
            # refused for the time it reports, as one processor: checked again with the job's own
            return await super().report(report, scope, batches)
        return Reported(before, None if row.id is None else row)


class SQLiteJobDB(SQLiteStatements, JobDB, dialect="sqlite"):
    pass


_NEW_IDS = "SELECT nextval(pg_get_serial_sequence('jobs', 'id')) FROM generate_series(1, %(n)s)"
_COPY_JOBS = (
    "COPY jobs (id, status, owner, owner_group, vo, account, cpu_time, user_priority, "
    "priority_class, job_class, task_queue_id, submitted_at, external_id) FROM STDIN"
)
_COPY_SPECS = "COPY job_specs (job_id, requirements, payload) FROM STDIN"
_COPY_WAITING = "COPY tq_jobs (job_id, tq_id, user_priority, real_priority) FROM STDIN"
_COPY_EVENTS = "COPY job_events (job_id, status, at, source, by) FROM STDIN"

# A status report in one statement: lock the job if the caller sees it, apply the report's
# transition from the status found (each column's value where the transition sets it there, its
# event where it is one), log the charge (bound, computed by the caller) with it, and answer the
# whole job after with the status before (NULL: not found; no job: refused). The SET list and
# the charge are rendered from the transition's columns and the charge log's rule; every value
# is bound, so the text is one for every report; the scope's text has fixed parameter names.
_REPORT = """
WITH locked AS MATERIALIZED (
    SELECT jobs.id, jobs.status FROM jobs
    WHERE jobs.id = %(job_id)s AND {visible}
    FOR UPDATE
), changed AS (
    UPDATE jobs
    SET {changes}
    FROM locked
    WHERE jobs.id = locked.id AND locked.status = ANY(CAST(%(taken_from)s AS varchar[]))
      -- the time reported, for one processor: UsedTime.latest_match
      AND (CAST(%(latest_match)s AS timestamptz) IS NULL OR jobs.matched_at IS NULL
           OR jobs.matched_at <= CAST(%(latest_match)s AS timestamptz))
    RETURNING jobs.*
), event AS (
    INSERT INTO job_events (job_id, status, minor_status, at, source, by)
    SELECT changed.id, changed.status, CAST(%(event_minor_status)s AS varchar), %(at)s, 'api', CAST(%(by)s AS varchar)
    FROM changed JOIN locked ON locked.id = changed.id
    WHERE locked.status = ANY(CAST(%(event_from)s AS varchar[]))
), charge AS (
    {charge}
    WHERE CAST(%(charge)s AS float8) IS NOT NULL
)
SELECT locked.status AS status_before, changed.*, job_specs.requirements, job_specs.payload
FROM (SELECT 1) AS one
LEFT JOIN locked ON true
LEFT JOIN changed ON true
LEFT JOIN job_specs ON job_specs.job_id = changed.id
"""


def _column_change(name: str) -> str:
    """A reported column's SET item: the transition's value where the status before is one in
    which it sets the column, else what the column holds."""
    sql_type = jobs.c[name].type.compile(dialect=postgresql_psycopg.dialect())
    return (
        f"{name} = CASE WHEN locked.status = ANY(CAST(%({name}_when)s AS varchar[])) "
        f"THEN CAST(%({name})s AS {sql_type}) ELSE jobs.{name} END"
    )


@lru_cache(maxsize=64)
def _report_sql(visible_sql: str) -> str:
    return _REPORT.format(
        visible=visible_sql,
        changes=",\n        ".join(map(_column_change, REPORTED_COLUMNS)),
        charge=charge_insert("changed", at="%(at)s", amount="CAST(%(charge)s AS float8)"),
    )


@lru_cache(maxsize=256)  # the same few sets, report after report
def _statuses(statuses: frozenset[JobStatus]) -> str:
    """A set of statuses as a parameter: an array literal, which the statement casts (a string
    costs the driver less to send than a list it adapts element by element)."""
    return "{" + ",".join(sorted(status.value for status in statuses)) + "}"


def _transition_params(transition: ReportTransition) -> dict[str, Any]:
    """The transition as `_report_sql`'s parameters: each column's value and where it is set,
    the event, the charge."""
    columns = {name: change.value for name, change in transition.columns.items()}
    where = {f"{name}_when": _statuses(change.when) for name, change in transition.columns.items()}
    return {
        **columns, **where, "taken_from": _statuses(transition.taken_from), "at": transition.at,
        "event_from": _statuses(transition.event_from), "event_minor_status": transition.minor_status,
        "charge": transition.charge(transition.cpu_seconds),
    }  # fmt: skip


def job_of(row: Any, *, matched_from: int | None = None) -> Job:
    """A whole job (its jobs row and its spec) as the API shows it. Its task queue is the one it
    waits in, or `matched_from` for the answer to the match that took it."""
    requirements = row.requirements or {}
    waiting_in = row.task_queue_id if row.status == JobStatus.Waiting else None
    return model_of(
        Job,
        row,
        job_id=row.id,
        task_queue_id=waiting_in if matched_from is None else matched_from,
        cpu_bucket=requirements.get("cpu_time"),
        **{field: requirements.get(field, []) for field in MULTI_VALUE_FIELDS},
        **{field: requirements.get(field, 0) for field in AMOUNT_FIELDS},
    )
