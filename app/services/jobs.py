"""Jobs: submit, read, report, reschedule, kill, reprioritise, and the watchdogs.

Each change runs in its own transaction; what other areas must hear of it
(level counts, provisional priorities, empty task queues) follows the commit,
best effort, because the background loops set all of it again anyway.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.auth.policy import JobScope
from app.clock import utcnow
from app.db.engine import read_transaction
from app.db.jobs import JobDB, job_dict
from app.db.taskqueues import TaskQueueDB
from app.errors import Conflict, NotFound
from app.jobs.classes import PriorityChange
from app.jobs.lifecycle import FINAL, JobStatus, allowed, lease_lapsed
from app.jobs.models import JobSpec, StatusUpdate
from app.jobs.submission import check_payloads, requested_cpu_time, requirements_key, requirements_of
from app.services import accounting, taskqueues
from app.services import priorities as priority_service
from app.settings import Settings
from app.taskqueues.requirements import Requirements, real_priority

log = logging.getLogger("fairmatch.jobs")

UNRESTRICTED = JobScope()
PRIORITY_CHANGE_ATTEMPTS = 3


async def _refresh_priorities(conn: AsyncConnection, settings: Settings, group_names: set[str]) -> None:
    """New TQs get provisional priorities now. Best effort: the jobs are committed,
    and the priority loop sets every priority again anyway."""
    if not group_names:
        return
    try:
        await priority_service.refresh_groups(conn, settings, group_names)
    except DBAPIError as exc:
        log.warning("provisional priorities for %s not set: %s", sorted(group_names), type(exc).__name__)


async def _record_arrivals(conn: AsyncConnection, arrivals: dict[int, Counter[float]], *, new_jobs: bool) -> None:
    """Count committed jobs into their TQs' levels. After the commit, in a short
    transaction of its own, so that concurrent submitters to a TQ wait for each
    other only that long. Best effort: the priority loop counts every level
    again, and until then a job on a level not yet counted waits (at most
    priority.interval_seconds)."""
    try:
        await taskqueues.queued(conn, arrivals, new_jobs=new_jobs)
    except DBAPIError as exc:
        log.warning("level counts of %d task queue(s) not updated: %s", len(arrivals), type(exc).__name__)


async def submit(conn: AsyncConnection, specs: Sequence[JobSpec], settings: Settings) -> list[dict[str, Any]]:
    """Queue all jobs or none. Returns job_id, task_queue_id and status per job, in order."""
    check_payloads(specs, settings.jobs.max_payload_bytes)
    now = utcnow()
    # jobs of one submission share a few requirement sets: build, hash and encode each once
    built: dict[tuple, Requirements] = {}
    for spec in specs:
        key = requirements_key(spec)
        if key not in built:
            built[key] = requirements_of(spec, settings)
    reqs = [built[requirements_key(spec)] for spec in specs]
    distinct = dict.fromkeys(reqs)
    hashes = {r: r.hash for r in distinct}
    as_json = {r: r.to_json() for r in distinct}
    async with conn.begin():
        tq_ids, created = await TaskQueueDB.of(conn).find_or_create(distinct, now)
        rows = [
            {
                "status": JobStatus.Waiting.value,
                "owner": r.owner,
                "owner_group": r.owner_group,
                "vo": r.vo,
                "cpu_time": requested_cpu_time(spec, settings),
                "requirements": as_json[r],
                "user_priority": spec.user_priority,
                "real_priority": real_priority(spec.user_priority),
                "priority_class": spec.priority_class,
                "job_class": spec.job_class,
                "payload": spec.payload,
                "task_queue_id": tq_ids[hashes[r]],
                "submitted_at": now,
            }
            for spec, r in zip(specs, reqs)
        ]
        job_ids = await JobDB.of(conn).insert_waiting(rows, now)
    arrivals: dict[int, Counter[float]] = {}
    for row in rows:
        arrivals.setdefault(row["task_queue_id"], Counter())[row["real_priority"]] += 1
    await _record_arrivals(conn, arrivals, new_jobs=True)
    await _refresh_priorities(conn, settings, {r.owner_group for r in distinct if hashes[r] in created})
    return [
        {"job_id": job_id, "task_queue_id": row["task_queue_id"], "status": JobStatus.Waiting.value}
        for job_id, row in zip(job_ids, rows)
    ]


def _missing(job_id: int) -> NotFound:
    return NotFound(f"job {job_id} does not exist")


async def get(conn: AsyncConnection, job_id: int, scope: JobScope = UNRESTRICTED) -> dict[str, Any]:
    async with read_transaction(conn):
        row = await JobDB.of(conn).get(job_id)
    if row is None or not scope.sees(row):
        raise _missing(job_id)
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


async def _lock_for_transition(job_db: JobDB, job_id: int, new: JobStatus, scope: JobScope) -> Any:
    """Lock the job row, and refuse with 404/409 unless `current -> new` is allowed."""
    row = await job_db.lock_state(job_id)
    if row is None or not scope.sees(row):
        raise _missing(job_id)
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
        return await reschedule(
            conn, job_id, now, settings, source="api", minor_status=report.minor_status, scope=scope
        )
    values: dict[str, Any] = {"status": new.value, "heartbeat_at": now}
    for field in ("minor_status", "cpu_seconds", "wall_seconds"):
        if getattr(report, field) is not None:
            values[field] = getattr(report, field)
    async with conn.begin():
        job_db = JobDB.of(conn)
        current = JobStatus((await _lock_for_transition(job_db, job_id, new, scope)).status)
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
    lease_expired_by: datetime | None = None,
) -> dict[str, Any] | None:
    """Matched or Stalled -> Waiting: back into its (possibly re-created) TQ.

    With `lease_expired_by`, only a job whose Matched lease ran out by then
    moves (checked under the row lock); otherwise None is returned.
    """
    async with conn.begin():
        job_db = JobDB.of(conn)
        locked = await _lock_for_transition(job_db, job_id, JobStatus.Waiting, scope)
        if lease_expired_by is not None and not lease_lapsed(locked, lease_expired_by):
            return None
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
        )
        await job_db.record_events([job_id], JobStatus.Waiting, now, source, minor_status)
    await _record_arrivals(conn, {tq_id: Counter({level: 1})}, new_jobs=False)
    if created:
        await _refresh_priorities(conn, settings, {reqs.owner_group})
    return job_dict(row)


async def kill(conn: AsyncConnection, job_id: int, scope: JobScope = UNRESTRICTED) -> dict[str, Any]:
    now = utcnow()
    async with conn.begin():
        job_db = JobDB.of(conn)
        removed_from = await job_db.remove_waiting(job_id)  # tq_jobs first: the claim locks in that order
        await _lock_for_transition(job_db, job_id, JobStatus.Killed, scope)
        row = await job_db.update(job_id, status=JobStatus.Killed.value, finished_at=now, lease_expires_at=None)
        await job_db.record_events([job_id], JobStatus.Killed, now, "kill")
    if removed_from is not None:
        await taskqueues.delete_if_empty(conn, removed_from)
    return job_dict(row)


async def expire_leases(conn: AsyncConnection, now: datetime, settings: Settings, batch: int = 1000) -> int:
    """Matched jobs whose pilot never confirmed go back to Waiting. Returns how many."""
    async with read_transaction(conn):
        due = await JobDB.of(conn).lapsed_leases(now, batch)
    returned = 0
    for job_id in due:
        try:
            moved = await reschedule(
                conn, job_id, now, settings, source="lease", minor_status="matched lease expired",
                lease_expired_by=now,
            )  # fmt: skip
        except (Conflict, NotFound):
            continue  # confirmed or killed in the meantime
        returned += moved is not None
    return returned


async def mark_stalled(conn: AsyncConnection, now: datetime, settings: Settings, batch: int = 1000) -> int:
    """Running jobs without a status report for the stall timeout become Stalled."""
    silent_since = now - timedelta(seconds=settings.jobs.stall_timeout_seconds)
    async with read_transaction(conn):
        due = await JobDB.of(conn).silent_running(silent_since, batch)
    stalled = 0
    for job_id in due:
        async with conn.begin():
            job_db = JobDB.of(conn)
            if await job_db.stall_if_silent(job_id, silent_since):
                await job_db.record_events([job_id], JobStatus.Stalled, now, "stall", "no heartbeat")
                stalled += 1
    return stalled


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
) -> dict[str, Any]:
    """Store a new user priority and/or priority class, moving a Waiting job to its new TQ.

    `check_class(current_class)` runs under the row lock and raises when the
    caller may not make this change (a user raising the class). The job's
    requirements are updated too, so a later reschedule queues it in the
    right TQ. Final jobs are a 409.
    """
    now = utcnow()
    for _ in range(PRIORITY_CHANGE_ATTEMPTS):
        try:
            async with conn.begin():
                row, left_tq = await _change_priority_locked(conn, job_id, change, now, check_class, scope)
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
        await _refresh_priorities(conn, settings, {row.owner_group})
    return job_dict(row)


async def _change_priority_locked(
    conn: AsyncConnection,
    job_id: int,
    change: PriorityChange,
    now: datetime,
    check_class: Callable[[int], None],
    scope: JobScope,
) -> tuple[Any, int | None]:
    """Inside the caller's transaction: (the updated jobs row, the TQ the job left or None)."""
    job_db = JobDB.of(conn)
    # tq_jobs row before jobs row: a claim racing us either skips this job or has
    # already taken it, and then the job is no longer Waiting
    queued_in = await job_db.lock_waiting(job_id)
    job = await job_db.lock_whole(job_id)
    if job is None or not scope.sees(job):
        raise _missing(job_id)
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
    reqs = dataclasses.replace(Requirements.from_json(job.requirements), priority_class=new_class)
    values: dict[str, Any] = {
        "priority_class": new_class,
        "user_priority": new_user_priority,
        "requirements": reqs.to_json(),
    }
    left_tq = None
    if queued_in is not None:
        found, _ = await TaskQueueDB.of(conn).find_or_create([reqs], now)
        values["task_queue_id"] = found[reqs.hash]
        await job_db.move_waiting(job_id, found[reqs.hash], new_user_priority, real_priority(new_user_priority))
        left_tq = queued_in if queued_in != values["task_queue_id"] else None
    row = await job_db.update(job_id, **values)
    what = (
        f"priority_class {job.priority_class}->{new_class}, "
        f"user_priority {job.user_priority}->{new_user_priority}"
    )
    await job_db.record_events([job_id], status, now, "priority", what)
    return row, left_tq
