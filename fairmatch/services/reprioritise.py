"""PATCH /jobs/{id}: a new user priority and/or priority class, and the task queue that follows."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.auth.policy import JobScope
from fairmatch.clock import utcnow
from fairmatch.db.jobs import JobDB, job_of
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.errors import Conflict
from fairmatch.jobs.classes import PriorityChange
from fairmatch.jobs.lifecycle import FINAL, JobStatus
from fairmatch.jobs.views import Job
from fairmatch.services import taskqueues
from fairmatch.services.jobs import UNRESTRICTED, missing
from fairmatch.services.queueing import refresh_priorities
from fairmatch.settings import Settings
from fairmatch.taskqueues.requirements import real_priority, requeued

PRIORITY_CHANGE_ATTEMPTS = 3


class _CaughtMidTransition(Exception):
    """The job was between Waiting and another state when looked at: look again."""


async def change_priority(
    conn: AsyncConnection,
    job_id: int,
    change: PriorityChange,
    settings: Settings,
    *,
    check_class: Callable[[int], None],
    scope: JobScope = UNRESTRICTED,
    by: str,
) -> Job:
    """Store a new user priority and/or priority class, moving a Waiting job to its new TQ;
    `by` who asked.

    `check_class(current_class)` runs under the row lock and raises when the
    caller may not make this change (a user raising the class). The spec keeps
    the submitted requirements; a later reschedule queues the job with the class
    it has now. Final jobs are a 409.
    """
    now = utcnow()
    for _ in range(PRIORITY_CHANGE_ATTEMPTS):
        try:
            async with conn.begin():
                row, left_tq = await _change_priority_locked(conn, job_id, change, now, check_class, scope, by)
            break
        except _CaughtMidTransition:
            continue
    else:
        raise Conflict(f"job {job_id} kept changing state; try again")
    if row.status == JobStatus.Waiting:
        if left_tq is not None:
            await taskqueues.delete_if_empty(conn, left_tq)
        # the TQ weights and level counts depend on the jobs' real priorities, and a
        # new TQ needs a priority now
        moved = {row.task_queue_id} | ({left_tq} if left_tq is not None else set())
        await refresh_priorities(conn, settings, {row.owner_group}, exact=moved)
    return job_of(row)


async def _change_priority_locked(
    conn: AsyncConnection,
    job_id: int,
    change: PriorityChange,
    now: datetime,
    check_class: Callable[[int], None],
    scope: JobScope,
    by: str,
) -> tuple[Any, int | None]:
    """Inside the caller's transaction: (the updated jobs row, the TQ the job left or None)."""
    job_db = JobDB.of(conn)
    # tq_jobs row before jobs row: a claim racing us either skips this job or has
    # already taken it, and then the job is no longer Waiting
    queued_in = await job_db.lock_waiting(job_id)
    job = await job_db.lock_whole(job_id)
    if job is None or not scope.sees(job):
        raise missing(job_id)
    status = JobStatus(job.status)
    if status in FINAL:
        raise Conflict(
            f"job {job_id} is {status.value}: its priority can no longer change", current_status=status.value
        )
    if (status is JobStatus.Waiting) != (queued_in is not None):
        raise _CaughtMidTransition  # e.g. a reschedule committed between our two reads
    check_class(job.priority_class)
    new_class = job.priority_class if change.priority_class is None else change.priority_class
    new_user_priority = job.user_priority if change.user_priority is None else change.user_priority
    reqs = requeued(job.requirements, new_class, job.account)
    values: dict[str, Any] = {"priority_class": new_class, "user_priority": new_user_priority}
    left_tq = None
    if queued_in is not None:
        found, _ = await TaskQueueDB.of(conn).find_or_create([reqs], now)
        values["task_queue_id"] = found[reqs.hash]
        await job_db.move_waiting(job_id, found[reqs.hash], new_user_priority, real_priority(new_user_priority))
        left_tq = queued_in if queued_in != values["task_queue_id"] else None
    row = await job_db.update(job_id, **values)
    what = f"priority_class {job.priority_class}->{new_class}, user_priority {job.user_priority}->{new_user_priority}"
    await job_db.record_events([job_id], status, now, "priority", what, by=by)
    return row, left_tq
