"""Jobs after submission: read, report a status, reschedule, kill.

Each change runs in its own transaction; what other areas must hear of it
(level counts, provisional priorities, empty task queues) follows the commit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.auth.policy import JobScope
from fairmatch.clock import utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.db.jobs import JobDB, job_dict
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.errors import Conflict, NotFound
from fairmatch.jobs.lifecycle import FINAL, JobStatus, allowed
from fairmatch.jobs.models import StatusUpdate
from fairmatch.services import accounting, taskqueues
from fairmatch.services.queueing import record_arrivals, refresh_priorities
from fairmatch.settings import Settings
from fairmatch.taskqueues.requirements import Requirements, real_priority

UNRESTRICTED = JobScope()
MAX_RESCHEDULES = "Maximum of reschedulings reached"  # DIRAC's minor status


def missing(job_id: int) -> NotFound:
    return NotFound(f"job {job_id} does not exist")


async def get(conn: AsyncConnection, job_id: int, scope: JobScope = UNRESTRICTED) -> dict[str, Any]:
    async with read_transaction(conn):
        row = await JobDB.of(conn).get(job_id)
    if row is None or not scope.sees(row):
        raise missing(job_id)
    return job_dict(row)


async def list_jobs(
    conn: AsyncConnection,
    *,
    status: JobStatus | None,
    owner: str | None,
    owner_group: str | None,
    after_id: int,
    limit: int,
    scope: JobScope = UNRESTRICTED,
) -> tuple[list[dict[str, Any]], int | None]:
    """One page in job-id order and the id to continue after (None at the end)."""
    async with read_transaction(conn):
        rows = await JobDB.of(conn).page(
            status=status, owner=owner, owner_group=owner_group, after_id=after_id, limit=limit + 1, scope=scope
        )
    page = [job_dict(r) for r in rows[:limit]]
    next_after = rows[limit - 1].id if len(rows) > limit else None
    return page, next_after


async def lock_for_transition(job_db: JobDB, job_id: int, new: JobStatus, scope: JobScope) -> Any:
    """Lock the job row, and refuse with 404/409 unless `current -> new` is allowed."""
    row = await job_db.lock_state(job_id)
    if row is None or not scope.sees(row):
        raise missing(job_id)
    current = JobStatus(row.status)
    if not allowed(current, new):
        raise Conflict(
            f"job {job_id} is {current.value}; it cannot become {new.value}",
            current_status=current.value,
            requested_status=new.value,
        )
    return row


async def report_status(
    conn: AsyncConnection,
    job_id: int,
    report: StatusUpdate,
    settings: Settings,
    scope: JobScope = UNRESTRICTED,
) -> dict[str, Any]:
    new = JobStatus(report.status)
    now = utcnow()
    if new is JobStatus.Waiting:
        rescheduled = await reschedule(
            conn, job_id, now, settings, source="api", minor_status=report.minor_status, scope=scope
        )
        assert rescheduled is not None  # without `only_if` the job always moves
        return rescheduled
    values: dict[str, Any] = {"status": new.value, "heartbeat_at": now}
    for field in ("minor_status", "cpu_seconds", "wall_seconds"):
        if getattr(report, field) is not None:
            values[field] = getattr(report, field)
    async with conn.begin():
        job_db = JobDB.of(conn)
        current = JobStatus((await lock_for_transition(job_db, job_id, new, scope)).status)
        if current is JobStatus.Matched:
            values.update(started_at=now, lease_expires_at=None)
        if new in FINAL:
            values["finished_at"] = now
        row = await job_db.update(job_id, **values)
        if new is not current:  # a heartbeat is not an event
            await job_db.record_events([job_id], new, now, "api", report.minor_status)
        if new in (JobStatus.Done, JobStatus.Failed):  # charged with the transition, or not at all
            await accounting.charge(conn, row, now, settings)
    return job_dict(row)


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
) -> dict[str, Any] | None:
    """Matched or Stalled -> Waiting: back into its (possibly re-created) TQ.

    With `only_if`, the job moves only if it holds for the row under its lock
    (a watchdog's re-check: a report may have just come); otherwise None is returned.
    A `counted` return (one its owner did not ask for) adds to the job's reschedules;
    past `jobs.max_reschedules` the job fails instead.
    """
    async with conn.begin():
        job_db = JobDB.of(conn)
        locked = await lock_for_transition(job_db, job_id, JobStatus.Waiting, scope)
        if only_if is not None and not only_if(locked):
            return None
        if counted and locked.reschedules >= settings.jobs.max_reschedules:
            row = await job_db.update(job_id, status=JobStatus.Failed.value, minor_status=MAX_RESCHEDULES,
                                      finished_at=now, lease_expires_at=None)  # fmt: skip
            await job_db.record_events([job_id], JobStatus.Failed, now, source, MAX_RESCHEDULES)
            await accounting.charge(conn, row, now, settings)
            return job_dict(row)
        job = await job_db.requeue_facts(job_id)
        await job_db.forget_match_request(job_id)
        reqs = Requirements.from_json(job.requirements)
        found, created = await TaskQueueDB.of(conn).find_or_create([reqs], now)
        tq_id = found[reqs.hash]
        level = real_priority(job.user_priority)
        await job_db.add_waiting(job_id, tq_id, job.user_priority, level)
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
        await job_db.record_events([job_id], JobStatus.Waiting, now, source, minor_status)
    await record_arrivals(conn, {tq_id: Counter({level: 1})}, new_jobs=False)
    if created:
        await refresh_priorities(conn, settings, {reqs.owner_group})
    return job_dict(row)


async def kill(conn: AsyncConnection, job_id: int, scope: JobScope = UNRESTRICTED) -> dict[str, Any]:
    now = utcnow()
    async with conn.begin():
        job_db = JobDB.of(conn)
        removed_from = await job_db.remove_waiting(job_id)  # tq_jobs first: the claim locks in that order
        await lock_for_transition(job_db, job_id, JobStatus.Killed, scope)
        row = await job_db.update(job_id, status=JobStatus.Killed.value, finished_at=now, lease_expires_at=None)
        await job_db.record_events([job_id], JobStatus.Killed, now, "kill")
    if removed_from is not None:
        await taskqueues.delete_if_empty(conn, removed_from)
    return job_dict(row)
