"""Job SQL: bulk submission, reads, status transitions and kill.

Lock order, everywhere: a job's tq_jobs row before its jobs row (the claim
does the same), so a kill racing a match cannot deadlock.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.accounting import usage as accounting
from app.auth.policy import JobScope
from app.clock import as_utc, utcnow
from app.db.dialect import is_postgresql
from app.db.engine import read_transaction
from app.db.tables import MULTI_VALUE_FIELDS, job_events, jobs, match_requests, tq_jobs
from app.errors import Conflict, InvalidInput, NotFound
from app.jobs import bulk
from app.jobs.classes import PriorityChange
from app.jobs.lifecycle import FINAL, JobStatus, allowed
from app.jobs.models import JobSpec, StatusUpdate
from app.priority import service as priority_service
from app.settings import Settings
from app.taskqueues import store as tq_store
from app.taskqueues.requirements import Requirements, real_priority

log = logging.getLogger("fairmatch.jobs")


def requested_cpu_time(spec: JobSpec, settings: Settings) -> int:
    return spec.cpu_time if spec.cpu_time is not None else settings.jobs.default_cpu_time


def requirements_of(spec: JobSpec, settings: Settings) -> Requirements:
    return Requirements.build(
        owner=spec.owner,
        owner_group=spec.owner_group,
        vo=spec.vo or settings.jobs.default_vo,
        cpu_time=requested_cpu_time(spec, settings),
        priority_class=spec.priority_class,
        job_class=spec.job_class,
        buckets=settings.taskqueues.cpu_buckets,
        **{field: getattr(spec, field) for field in MULTI_VALUE_FIELDS},
    )


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
        await tq_store.queued(conn, arrivals, new_jobs=new_jobs)
    except DBAPIError as exc:
        log.warning("level counts of %d task queue(s) not updated: %s", len(arrivals), type(exc).__name__)


def check_payloads(specs: Sequence[JobSpec], limit: int) -> None:
    errors = []
    for i, spec in enumerate(specs):
        loc = ["body", "jobs", i, "payload"]
        try:
            # strict JSON: no NaN/Infinity, no lone surrogates, which databases refuse
            encoded = json.dumps(spec.payload, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
            size = len(encoded.encode())
        except (ValueError, UnicodeEncodeError):
            errors.append({"loc": loc, "msg": "payload is not strict JSON", "type": "json_invalid"})
            continue
        if size > limit:
            errors.append(
                {"loc": loc, "msg": f"payload is {size} bytes, the limit is {limit}", "type": "too_long"}
            )
    if errors:
        raise InvalidInput(f"{len(errors)} job payload(s) invalid or over {limit} bytes", errors)


async def submit(
    conn: AsyncConnection, specs: Sequence[JobSpec], settings: Settings
) -> list[dict[str, Any]]:
    """Queue all jobs or none. Returns job_id, task_queue_id and status per job, in order."""
    check_payloads(specs, settings.jobs.max_payload_bytes)
    now = utcnow()
    # jobs of one submission share a few requirement sets: build, hash and encode each once
    built: dict[tuple, Requirements] = {}
    for spec in specs:
        key = _requirements_key(spec)
        if key not in built:
            built[key] = requirements_of(spec, settings)
    reqs = [built[_requirements_key(spec)] for spec in specs]
    distinct = dict.fromkeys(reqs)
    hashes = {r: r.hash for r in distinct}
    as_json = {r: r.to_json() for r in distinct}
    async with conn.begin():
        tq_ids, created = await tq_store.find_or_create(conn, distinct, now)
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
        if is_postgresql(conn):
            job_ids = await bulk.insert_jobs(conn, rows, now)
        else:
            job_ids = await _insert_jobs(conn, rows, now)
    arrivals: dict[int, Counter[float]] = {}
    for row in rows:
        arrivals.setdefault(row["task_queue_id"], Counter())[row["real_priority"]] += 1
    await _record_arrivals(conn, arrivals, new_jobs=True)
    await _refresh_priorities(conn, settings, {r.owner_group for r in distinct if hashes[r] in created})
    return [
        {"job_id": job_id, "task_queue_id": row["task_queue_id"], "status": JobStatus.Waiting.value}
        for job_id, row in zip(job_ids, rows)
    ]


def _requirements_key(spec: JobSpec) -> tuple:
    """The JobSpec fields its Requirements are built from."""
    values = tuple(tuple(v) if isinstance(v, list) else v for v in (getattr(spec, f) for f in MULTI_VALUE_FIELDS))
    return (spec.owner, spec.owner_group, spec.vo, spec.cpu_time, spec.priority_class, spec.job_class, values)


async def _insert_jobs(conn: AsyncConnection, rows: list[dict[str, Any]], now: datetime) -> list[int]:
    """Jobs, their tq_jobs rows and events as multi-row INSERTs (SQLite)."""
    job_ids: list[int] = []
    job_columns = [{k: v for k, v in row.items() if k != "real_priority"} for row in rows]
    for part in tq_store.chunks(job_columns):
        result = await conn.execute(insert(jobs).returning(jobs.c.id, sort_by_parameter_order=True), list(part))
        job_ids.extend(result.scalars().all())
    waiting = [
        {
            "job_id": job_id,
            "tq_id": row["task_queue_id"],
            "user_priority": row["user_priority"],
            "real_priority": row["real_priority"],
        }
        for job_id, row in zip(job_ids, rows)
    ]
    for part in tq_store.chunks(waiting):
        await conn.execute(insert(tq_jobs), list(part))
    await _record_events(conn, job_ids, JobStatus.Waiting, now, "submit")
    return job_ids


async def _record_events(
    conn: AsyncConnection,
    job_ids: Sequence[int],
    status: JobStatus,
    now: datetime,
    source: str,
    minor_status: str | None = None,
) -> None:
    events = [
        {"job_id": j, "status": status.value, "minor_status": minor_status, "at": now, "source": source}
        for j in job_ids
    ]
    for part in tq_store.chunks(events):
        await conn.execute(insert(job_events), list(part))


def job_dict(row: Any) -> dict[str, Any]:
    """A jobs row as the API shows it."""
    requirements = row.requirements or {}
    return {
        "job_id": row.id,
        "status": row.status,
        "minor_status": row.minor_status,
        "task_queue_id": row.task_queue_id if row.status == JobStatus.Waiting else None,
        "owner": row.owner,
        "owner_group": row.owner_group,
        "vo": row.vo,
        "cpu_time": row.cpu_time,
        "cpu_bucket": requirements.get("cpu_time"),
        **{field: list(requirements.get(field, [])) for field in MULTI_VALUE_FIELDS},
        "user_priority": row.user_priority,
        "priority_class": row.priority_class,
        "job_class": row.job_class,
        "payload": row.payload,
        "site": row.site,
        "pilot_reference": row.pilot_reference,
        "submitted_at": as_utc(row.submitted_at),
        "matched_at": as_utc(row.matched_at),
        "lease_expires_at": as_utc(row.lease_expires_at),
        "started_at": as_utc(row.started_at),
        "heartbeat_at": as_utc(row.heartbeat_at),
        "finished_at": as_utc(row.finished_at),
        "cpu_seconds": row.cpu_seconds,
        "wall_seconds": row.wall_seconds,
    }


UNRESTRICTED = JobScope()


def _missing(job_id: int) -> NotFound:
    return NotFound(f"job {job_id} does not exist")


async def get(conn: AsyncConnection, job_id: int, scope: JobScope = UNRESTRICTED) -> dict[str, Any]:
    async with read_transaction(conn):
        row = (await conn.execute(select(jobs).where(jobs.c.id == job_id))).first()
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
    stmt = select(jobs).where(jobs.c.id > after_id).order_by(jobs.c.id).limit(limit + 1)
    if scope.owner is not None:
        stmt = stmt.where(jobs.c.owner == scope.owner)
    if scope.owner_groups is not None:
        stmt = stmt.where(jobs.c.owner_group.in_(sorted(scope.owner_groups)))
    if scope.matched_by is not None:
        stmt = stmt.where(jobs.c.matched_by == scope.matched_by)
    if status is not None:
        stmt = stmt.where(jobs.c.status == status.value)
    if owner is not None:
        stmt = stmt.where(jobs.c.owner == owner)
    if owner_group is not None:
        stmt = stmt.where(jobs.c.owner_group == owner_group)
    async with read_transaction(conn):
        rows = (await conn.execute(stmt)).all()
    page = [job_dict(r) for r in rows[:limit]]
    next_after = rows[limit - 1].id if len(rows) > limit else None
    return page, next_after


async def _lock_for_transition(
    conn: AsyncConnection, job_id: int, new: JobStatus, scope: JobScope
) -> Any:
    """Lock the job row, and refuse with 404/409 unless `current -> new` is allowed."""
    row = (
        await conn.execute(
            select(
                jobs.c.status, jobs.c.owner, jobs.c.owner_group, jobs.c.matched_by, jobs.c.lease_expires_at
            )
            .where(jobs.c.id == job_id)
            .with_for_update()
        )
    ).first()
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
        current = JobStatus((await _lock_for_transition(conn, job_id, new, scope)).status)
        if current is JobStatus.Matched:
            values.update(started_at=now, lease_expires_at=None)
        if new in FINAL:
            values["finished_at"] = now
        row = (
            await conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values).returning(jobs))
        ).one()
        if new is not current:  # a heartbeat is not an event
            await _record_events(conn, [job_id], new, now, "api", report.minor_status)
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
        locked = await _lock_for_transition(conn, job_id, JobStatus.Waiting, scope)
        if lease_expired_by is not None and not _lease_expired(locked, lease_expired_by):
            return None
        job = (
            await conn.execute(
                select(jobs.c.requirements, jobs.c.user_priority).where(jobs.c.id == job_id)
            )
        ).one()
        # the old match is void: a late replay of its request id must not return this job
        await conn.execute(delete(match_requests).where(match_requests.c.job_id == job_id))
        reqs = Requirements.from_json(job.requirements)
        found, created = await tq_store.find_or_create(conn, [reqs], now)
        tq_id = found[reqs.hash]
        level = real_priority(job.user_priority)
        await conn.execute(
            insert(tq_jobs).values(job_id=job_id, tq_id=tq_id, user_priority=job.user_priority, real_priority=level)
        )
        row = (
            await conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id)
                .values(
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
                .returning(jobs)
            )
        ).one()
        await _record_events(conn, [job_id], JobStatus.Waiting, now, source, minor_status)
    await _record_arrivals(conn, {tq_id: Counter({level: 1})}, new_jobs=False)
    if created:
        await _refresh_priorities(conn, settings, {reqs.owner_group})
    return job_dict(row)


async def kill(conn: AsyncConnection, job_id: int, scope: JobScope = UNRESTRICTED) -> dict[str, Any]:
    now = utcnow()
    async with conn.begin():
        # tq_jobs first: the claim locks in the same order
        removed_from = (
            await conn.execute(
                delete(tq_jobs).where(tq_jobs.c.job_id == job_id).returning(tq_jobs.c.tq_id)
            )
        ).scalar()
        await _lock_for_transition(conn, job_id, JobStatus.Killed, scope)
        row = (
            await conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id)
                .values(status=JobStatus.Killed.value, finished_at=now, lease_expires_at=None)
                .returning(jobs)
            )
        ).one()
        await _record_events(conn, [job_id], JobStatus.Killed, now, "kill")
    if removed_from is not None:
        await tq_store.delete_if_empty(conn, removed_from)
    return job_dict(row)


def _lease_expired(row: Any, by: datetime) -> bool:
    lease = as_utc(row.lease_expires_at)
    return row.status == JobStatus.Matched and lease is not None and lease <= by


async def expire_leases(conn: AsyncConnection, now: datetime, settings: Settings, batch: int = 1000) -> int:
    """Matched jobs whose pilot never confirmed go back to Waiting. Returns how many."""
    async with read_transaction(conn):
        due = (
            await conn.execute(
                select(jobs.c.id)
                .where(jobs.c.status == JobStatus.Matched.value, jobs.c.lease_expires_at <= now)
                .order_by(jobs.c.lease_expires_at)
                .limit(batch)
            )
        ).scalars().all()
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
        due = (
            await conn.execute(
                select(jobs.c.id)
                .where(jobs.c.status == JobStatus.Running.value, jobs.c.heartbeat_at <= silent_since)
                .limit(batch)
            )
        ).scalars().all()
    stalled = 0
    for job_id in due:
        async with conn.begin():
            # re-checked under the lock: a heartbeat may have just arrived
            row = (
                await conn.execute(
                    update(jobs)
                    .where(
                        jobs.c.id == job_id,
                        jobs.c.status == JobStatus.Running.value,
                        jobs.c.heartbeat_at <= silent_since,
                    )
                    .values(status=JobStatus.Stalled.value, minor_status="no heartbeat")
                    .returning(jobs.c.id)
                )
            ).first()
            if row is not None:
                await _record_events(conn, [job_id], JobStatus.Stalled, now, "stall", "no heartbeat")
                stalled += 1
    return stalled


def lease_until(now: datetime, settings: Settings) -> datetime:
    return now + timedelta(seconds=settings.jobs.matched_lease_seconds)


# --- PATCH: a new user priority and/or priority class --------------------------------

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
            await tq_store.delete_if_empty(conn, left_tq)
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
    # tq_jobs row before jobs row (module docstring): a claim racing us either
    # skips this job or has already taken it, and then the job is no longer Waiting
    queued_in = (
        await conn.execute(select(tq_jobs.c.tq_id).where(tq_jobs.c.job_id == job_id).with_for_update())
    ).scalar()
    job = (await conn.execute(select(jobs).where(jobs.c.id == job_id).with_for_update())).first()
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
        values["task_queue_id"] = await _requeue(conn, job_id, reqs, new_user_priority, now)
        left_tq = queued_in if queued_in != values["task_queue_id"] else None
    row = (await conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values).returning(jobs))).one()
    what = (
        f"priority_class {job.priority_class}->{new_class}, "
        f"user_priority {job.user_priority}->{new_user_priority}"
    )
    await _record_events(conn, [job_id], status, now, "priority", what)
    return row, left_tq


async def _requeue(
    conn: AsyncConnection, job_id: int, reqs: Requirements, user_priority: int, now: datetime
) -> int:
    """Point the job's (locked) tq_jobs row at the TQ of `reqs` with its new level; the TQ id."""
    found, _ = await tq_store.find_or_create(conn, [reqs], now)
    tq_id = found[reqs.hash]
    await conn.execute(
        update(tq_jobs)
        .where(tq_jobs.c.job_id == job_id)
        .values(tq_id=tq_id, user_priority=user_priority, real_priority=real_priority(user_priority))
    )
    return tq_id
