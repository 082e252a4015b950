"""Actions on many jobs at once: kill, hold, release, reschedule, priority.

The selection (the listing's filters, or job ids) is walked in id order, BATCH jobs
at a time. Kill, hold and release change each batch set-based in one short
transaction (fairmatch.db.bulk says in which lock order); reschedule and a priority
change take each job through the one-job path, a short transaction each. Matching
goes on meanwhile: nothing locks a table, and a job a pilot claims between two
batches is simply no longer Waiting when its batch comes.

A job the action does not apply to (a finished job killed, a running one held) is
counted as matched, not changed, and left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.auth.policy import JobScope
from fairmatch.clock import utcnow
from fairmatch.db.bulk import BulkDB
from fairmatch.db.engine import read_transaction
from fairmatch.db.jobs import JobDB
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.errors import Conflict, NotFound
from fairmatch.jobs.classes import PriorityChange
from fairmatch.jobs.filters import JobFilter
from fairmatch.jobs.lifecycle import FINAL, HELD, KILLED, RELEASED, RESCHEDULABLE, JobStatus, allowed
from fairmatch.services import audit, reprioritise, taskqueues
from fairmatch.services import jobs as job_service
from fairmatch.services.queueing import arrivals_of, record_arrivals, refresh_priorities
from fairmatch.settings import Settings
from fairmatch.taskqueues.requirements import real_priority, requeued

BATCH = 500  # jobs changed per transaction
LISTED = 1000  # job ids an answer lists


class BulkAction(StrEnum):
    kill = "kill"
    hold = "hold"
    release = "release"
    reschedule = "reschedule"
    priority = "priority"


# the status each action gives, and which statuses it applies to
TARGET = {
    BulkAction.kill: JobStatus.Killed,
    BulkAction.hold: JobStatus.Held,
    BulkAction.release: JobStatus.Waiting,
    BulkAction.reschedule: JobStatus.Waiting,
}
# the minor status each action that changes jobs set-based gives them
MINOR_STATUS = {BulkAction.kill: KILLED, BulkAction.hold: HELD, BulkAction.release: RELEASED}


def applies(action: BulkAction, status: JobStatus) -> bool:
    """Whether the action changes a job in this status."""
    if action is BulkAction.priority:
        return status not in FINAL
    if action is BulkAction.release:
        return status is JobStatus.Held
    if action is BulkAction.reschedule:
        return status in RESCHEDULABLE
    return allowed(status, TARGET[action])


@dataclass(frozen=True)
class Selection:
    """Which jobs: the listing's filters, and when given only these ids."""

    filters: JobFilter
    job_ids: Sequence[int] | None = None


@dataclass(frozen=True)
class Request:
    action: BulkAction
    selection: Selection
    by: str  # the caller's identity
    scope: JobScope  # users act on their own jobs
    dry_run: bool = False
    reason: str | None = None  # why: the jobs' minor status, and in the audit log
    change: PriorityChange | None = None  # the priority action's new values
    check_class: Callable[[int], None] | None = None  # raises when the caller may not set that class


async def act(conn: AsyncConnection, request: Request, settings: Settings) -> dict[str, Any]:
    """Apply the action to every selected job it applies to, a batch at a time, and audit it
    (a dry run changes nothing and is not audited). Returns how many jobs the selection
    matched, how many changed (a dry run: would change), and the ids of the first LISTED
    of those."""
    matched, changed = 0, 0
    listed: list[int] = []
    after = 0
    while True:
        async with read_transaction(conn):
            batch = await BulkDB.of(conn).selected(
                request.selection.filters, request.selection.job_ids, after_id=after, limit=BATCH, scope=request.scope
            )
        if not batch:
            break
        after = batch[-1][0]
        matched += len(batch)
        candidates = [job_id for job_id, status in batch if applies(request.action, JobStatus(status))]
        done = candidates if request.dry_run or not candidates else await _apply(conn, request, candidates, settings)
        changed += len(done)
        listed.extend(done[: LISTED - len(listed)])
    result = {"matched": matched, "changed": changed, "job_ids": listed}
    if not request.dry_run:
        await _audit(conn, request, result)
    return result


async def _audit(conn: AsyncConnection, request: Request, result: dict[str, Any]) -> None:
    selection = request.selection
    chosen = selection.filters.model_dump(mode="json", exclude_defaults=True)
    if selection.job_ids is not None:
        chosen["job_ids"] = list(selection.job_ids)
    # what the jobs became: the new priority values, or the status the action gives
    if request.change is not None:
        became = request.change.model_dump(mode="json", exclude_none=True)
    else:
        became = {"status": TARGET[request.action].value}
    # the log keeps a glimpse of the jobs changed; the answer has the rest
    detail = {"filter": chosen, "new": became, **result, "job_ids": result["job_ids"][:20]}
    if request.reason is not None:
        detail["reason"] = request.reason
    await audit.record(conn, request.by, f"bulk.{request.action.value}", None, detail)


async def _apply(conn: AsyncConnection, request: Request, job_ids: list[int], settings: Settings) -> list[int]:
    if request.action in (BulkAction.kill, BulkAction.hold):
        minor_status = request.reason or MINOR_STATUS[request.action]
        return await _take_out(conn, job_ids, TARGET[request.action], minor_status, request.action.value, request.by)
    if request.action is BulkAction.release:
        return await _release(conn, job_ids, request.by, settings, request.reason)
    return await _one_by_one(conn, request, job_ids, settings)


async def _take_out(
    conn: AsyncConnection, job_ids: list[int], status: JobStatus, minor_status: str, source: str, by: str
) -> list[int]:
    """Kill or hold one batch: out of their task queues, then the status and minor status (the
    action's reason, or its own wording), in one transaction."""
    now = utcnow()
    async with conn.begin():
        db = BulkDB.of(conn)
        unqueued = await db.unqueue(job_ids)  # tq_jobs first: the claim locks in that order
        locked = await db.lock(job_ids)
        moving = [job_id for job_id, row in locked.items() if allowed(JobStatus(row.status), status)]
        # a job whose tq_jobs row went but which may not move was no longer Waiting: it had none
        values: dict[str, Any] = {"status": status.value, "minor_status": minor_status, "lease_expires_at": None}
        if status in FINAL:
            values["finished_at"] = now
        await db.set_values(moving, **values)
        await JobDB.of(conn).record_events(moving, status, now, source, minor_status, by=by)
    for tq_id in sorted({unqueued[job_id] for job_id in moving if job_id in unqueued}):
        await taskqueues.delete_if_empty(conn, tq_id)
    return moving


async def _release(
    conn: AsyncConnection, job_ids: list[int], by: str, settings: Settings, reason: str | None
) -> list[int]:
    """Held -> Waiting for one batch: each job queued again (its task queue made again if it
    went meanwhile) with its id, so with the place its id gives it, and its priority now."""
    now = utcnow()
    async with conn.begin():
        db = BulkDB.of(conn)
        held = {job_id: row for job_id, row in (await db.lock(job_ids)).items() if row.status == JobStatus.Held}
        if not held:
            return []  # released by another caller meanwhile
        wanted = {job_id: requeued(row.requirements, row.priority_class, row.account) for job_id, row in held.items()}
        found, created = await TaskQueueDB.of(conn).find_or_create(set(wanted.values()), now)
        rows = [
            {"job_id": job_id, "tq_id": found[reqs.hash], "user_priority": held[job_id].user_priority,
             "real_priority": real_priority(held[job_id].user_priority)}
            for job_id, reqs in sorted(wanted.items())
        ]  # fmt: skip
        minor_status = reason or MINOR_STATUS[BulkAction.release]
        await db.set_values(held, status=JobStatus.Waiting.value, minor_status=minor_status)
        await db.queue(rows)
        await JobDB.of(conn).record_events(sorted(held), JobStatus.Waiting, now, "release", minor_status, by=by)
    await record_arrivals(conn, arrivals_of((row["tq_id"], row["real_priority"]) for row in rows), new_jobs=False)
    await refresh_priorities(conn, settings, {reqs.owner_group for reqs in wanted.values() if reqs.hash in created})
    return sorted(held)


async def _one_by_one(conn: AsyncConnection, request: Request, job_ids: list[int], settings: Settings) -> list[int]:
    """Reschedule or change the priority of each job through its own path; a job that moved
    on meanwhile (matched, finished, killed) is skipped."""
    moved = []
    for job_id in job_ids:
        try:
            await _one(conn, request, job_id, settings, utcnow())
        except (Conflict, NotFound):
            continue
        moved.append(job_id)
    return moved


async def _one(conn: AsyncConnection, request: Request, job_id: int, settings: Settings, now: datetime) -> None:
    if request.action is BulkAction.reschedule:
        await job_service.reschedule(
            conn, job_id, now, settings, source="reschedule", minor_status=request.reason or "rescheduled in bulk",
            scope=request.scope, by=request.by,
        )  # fmt: skip
        return
    assert request.change is not None and request.check_class is not None
    await reprioritise.change_priority(
        conn, job_id, request.change, settings, check_class=request.check_class, scope=request.scope, by=request.by
    )
