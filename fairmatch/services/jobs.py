"""Jobs after submission: read, report a status, reschedule, kill.

Each change runs in its own transaction; what other areas must hear of it
(level counts, provisional priorities, empty task queues) follows the commit.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.auth.policy import JobScope
from fairmatch.clock import as_utc, utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.db.jobs import JobDB, StatusReport, job_of
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.errors import Conflict, InvalidInput, NotFound
from fairmatch.jobs.filters import JobFilter, JobOrder
from fairmatch.jobs.lifecycle import FINAL, KILLED, RESCHEDULABLE, JobStatus, allowed
from fairmatch.jobs.models import StatusUpdate
from fairmatch.jobs.reports import UsedTime
from fairmatch.jobs.transition import report_transition
from fairmatch.jobs.views import Job
from fairmatch.services import accounting, taskqueues
from fairmatch.services.process import Process
from fairmatch.services.queueing import arrivals_of, record_arrivals, refresh_priorities
from fairmatch.settings import Settings
from fairmatch.taskqueues.requirements import real_priority

UNRESTRICTED = JobScope()
MAX_RESCHEDULES = "Maximum of reschedulings reached"  # DIRAC's minor status


def missing(job_id: int) -> NotFound:
    return NotFound(f"job {job_id} does not exist")


async def get(conn: AsyncConnection, job_id: int, scope: JobScope = UNRESTRICTED) -> Job:
    async with read_transaction(conn):
        row = await JobDB.of(conn).get(job_id, scope)
    if row is None:
        raise missing(job_id)
    return job_of(row)


async def by_external_id(conn: AsyncConnection, external_id: str, scope: JobScope = UNRESTRICTED) -> Job:
    """The job holding the external id, else the newest that held it (404: none)."""
    async with read_transaction(conn):
        row = await JobDB.of(conn).by_external_id(external_id, scope)
    if row is None:
        raise NotFound(f"no job has external id {external_id!r}")
    return job_of(row)


async def withdraw(conn: AsyncConnection, external_id: str, scope: JobScope = UNRESTRICTED, *, by: str) -> Job:
    """Take the Waiting or Held job holding the external id out of the queues for good (it ends
    Killed, as DIRAC's deleteJob takes a job out of its TaskQueueDB); 404 when no unfinished
    job holds it, 409 when its holder is no longer waiting (a match took it first)."""
    async with read_transaction(conn):
        row = await JobDB.of(conn).by_external_id(external_id, scope)
    if row is None or JobStatus(row.status) in FINAL:
        raise NotFound(f"no unfinished job holds external id {external_id!r}")
    return await kill(
        conn, row.id, scope, by=by, waiting_only=True, source="withdraw", minor_status="Withdrawn by its submitter"
    )


async def history(conn: AsyncConnection, job_id: int, scope: JobScope = UNRESTRICTED) -> dict[str, Any]:
    """What happened to a job, oldest first: each status it took, when, through what, and by whom."""
    async with read_transaction(conn):
        events = await JobDB.of(conn).history(job_id, scope)
    if events is None:
        raise missing(job_id)
    return {"job_id": job_id, "events": [{**event._asdict(), "at": as_utc(event.at)} for event in events]}


async def list_jobs(
    conn: AsyncConnection,
    filters: JobFilter,
    *,
    after_id: int | None,
    limit: int,
    scope: JobScope = UNRESTRICTED,
    order: JobOrder = JobOrder.oldest,
) -> tuple[list[Job], int | None]:
    """One page in `order` (by job id) past `after_id` (None: the first page), and the id the
    next page continues from (None at the end)."""
    async with read_transaction(conn):
        rows = await JobDB.of(conn).page(filters, after_id=after_id, limit=limit + 1, scope=scope, order=order)
    page = [job_of(r) for r in rows[:limit]]
    next_after = rows[limit - 1].id if len(rows) > limit else None
    return page, next_after


def refused(job_id: int, current: JobStatus, new: JobStatus) -> Conflict:
    return Conflict(
        f"job {job_id} is {current.value}; it cannot become {new.value}",
        current_status=current.value,
        requested_status=new.value,
    )


async def lock_for_transition(job_db: JobDB, job_id: int, new: JobStatus, scope: JobScope) -> Any:
    """Lock the job row, and refuse with 404/409 unless `current -> new` is allowed."""
    row = await job_db.lock_state(job_id, scope)
    if row is None:
        raise missing(job_id)
    current = JobStatus(row.status)
    if not allowed(current, new):
        raise refused(job_id, current, new)
    return row


async def report_status(
    conn: AsyncConnection,
    job_id: int,
    report: StatusUpdate,
    settings: Settings,
    scope: JobScope = UNRESTRICTED,
    *,
    by: str,
    counted: bool = False,
) -> Job:
    """A pilot's report (`by` the caller's identity): the job takes the status if it may (404 out of the scope, 409 refused,
    422 for more time used than physics allows), with its event and, when it finishes, its
    charge; the whole job after.

    The transition and its charge are stated once (`report_transition`), the scope by its own
    rule; the data layer applies them in one step (on PostgreSQL one statement). Waiting is a reschedule, `counted` in the job's
    reschedules when its pilot hands it back (past `jobs.max_reschedules` the job fails)."""
    new = JobStatus(report.status)
    now = utcnow()
    if new is JobStatus.Waiting:
        rescheduled = await reschedule(
            conn,
            job_id,
            now,
            settings,
            source="api",
            minor_status=report.minor_status,
            scope=scope,
            counted=counted,
            by=by,
        )
        assert rescheduled is not None  # without `only_if` the job always moves
        return rescheduled
    transition = report_transition(
        new, report.minor_status, report.cpu_seconds, report.wall_seconds, now, settings.accounting
    )
    used = UsedTime(report.cpu_seconds, report.wall_seconds, now, settings.jobs.clock_skew_seconds)
    reported = await JobDB.of(conn).report(StatusReport(job_id, transition, used, by), scope, Process.of(conn).batches)
    if reported.before is None:
        raise missing(job_id)
    if reported.out_of_bounds is not None:
        bound = reported.out_of_bounds
        raise InvalidInput(
            bound.message,
            errors=[{"loc": ["body", bound.field], "type": "value_error", "msg": bound.message,
                     "ctx": {"bound": round(bound.bound, 3)}}],
        )  # fmt: skip
    if reported.job is None:
        raise refused(job_id, reported.before, new)
    return job_of(reported.job)


async def reschedule(
    conn: AsyncConnection,
    job_id: int,
    now: datetime,
    settings: Settings,
    *,
    source: str,
    minor_status: str | None = None,
    scope: JobScope = UNRESTRICTED,
    only_if: Callable[[Any], bool] | None = None,
    counted: bool = False,
    by: str,
) -> Job | None:
    """Matched or Stalled -> Waiting: back into its (possibly re-created) TQ; `by` who acted.

    With `only_if`, the job moves only if it holds for the row under its lock
    (a watchdog's re-check: a report may have just come); otherwise None is returned.
    A `counted` return (one its owner did not ask for: a lapsed lease, a stalled job, a
    pilot handing the job back) adds to the job's reschedules;
    past `jobs.max_reschedules` the job fails instead.
    """
    async with conn.begin():
        job_db = JobDB.of(conn)
        locked = await lock_for_transition(job_db, job_id, JobStatus.Waiting, scope)
        if JobStatus(locked.status) not in RESCHEDULABLE:  # a held job goes back by its release
            raise refused(job_id, JobStatus(locked.status), JobStatus.Waiting)
        if only_if is not None and not only_if(locked):
            return None
        if counted and locked.reschedules >= settings.jobs.max_reschedules:
            row = await job_db.update(job_id, status=JobStatus.Failed.value, minor_status=MAX_RESCHEDULES,
                                      finished_at=now, lease_expires_at=None)  # fmt: skip
            await job_db.record_events([job_id], JobStatus.Failed, now, source, MAX_RESCHEDULES, by=by)
            await accounting.charge(conn, row, now, settings)
            return job_of(row)
        reqs, user_priority = await job_db.requeue_facts(job_id)
        await job_db.forget_match_request(job_id)
        found, created = await TaskQueueDB.of(conn).find_or_create([reqs], now)
        tq_id = found[reqs.hash]
        level = real_priority(user_priority)
        await job_db.add_waiting(job_id, tq_id, user_priority, level)
        row = await job_db.update(
            job_id,
            status=JobStatus.Waiting.value,
            minor_status=minor_status,
            task_queue_id=tq_id,
            site=None,
            pilot_reference=None,
            matched_by=None,
            matched_at=None,
            lease_expires_at=None,
            started_at=None,
            heartbeat_at=None,
            reschedules=locked.reschedules + counted,
        )
        await job_db.record_events([job_id], JobStatus.Waiting, now, source, minor_status, by=by)
    await record_arrivals(conn, arrivals_of([(tq_id, level)]), new_jobs=False)
    if created:
        await refresh_priorities(conn, settings, {reqs.owner_group})
    return job_of(row)


async def kill(
    conn: AsyncConnection,
    job_id: int,
    scope: JobScope = UNRESTRICTED,
    *,
    by: str,
    waiting_only: bool = False,
    source: str = "kill",
    minor_status: str = KILLED,
) -> Job:
    """The job ends Killed (409 once final); with `waiting_only`, only a Waiting or Held job does."""
    now = utcnow()
    async with conn.begin():
        job_db = JobDB.of(conn)
        removed_from = await job_db.remove_waiting(job_id)  # tq_jobs first: the claim locks in that order
        state = await lock_for_transition(job_db, job_id, JobStatus.Killed, scope)
        if waiting_only and state.status not in (JobStatus.Waiting, JobStatus.Held):
            raise Conflict(f"job {job_id} is {state.status}, no longer waiting")
        row = await job_db.update(
            job_id, status=JobStatus.Killed.value, minor_status=minor_status, finished_at=now, lease_expires_at=None
        )
        await job_db.record_events([job_id], JobStatus.Killed, now, source, minor_status, by=by)
    if removed_from is not None:
        await taskqueues.delete_if_empty(conn, removed_from)
    return job_of(row)
