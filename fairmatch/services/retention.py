"""The purge: finished jobs, their events, request ids and pilots past the retention settings.

Every batch is its own short transaction (fairmatch.db.retention), so claims and
status reports never wait behind a purge. The background purge runs in one
process at a time: it holds a session-level advisory lock on its own
connection across its batches (PostgreSQL; SQLite is served by one process).
With `retention.archive_dir` each batch's jobs are appended to the archive
and synced before the batch's delete commits; an archive that cannot be
written stops the purge before it deletes another job.

Nothing the priority policies read goes: usage charges and totals carry no
reference to a job's row, the running-job history counts samples, and only
final jobs (never Waiting, Matched, Running or Stalled) are deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.clock import utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.db.retention import RetentionDB
from fairmatch.errors import ArchiveUnavailable, DatabaseError
from fairmatch.jobs import archive
from fairmatch.jobs.lifecycle import FINAL
from fairmatch.metrics import JOBS_PURGED
from fairmatch.settings import RetentionSettings, Settings

log = logging.getLogger("fairmatch.retention")

KEEP_RUNS = 100  # the purge runs kept for GET /status and for operators
FINAL_STATUSES = sorted(FINAL)
# the events purge starts again this far before where the last one stopped: a job that
# finished just before that cutoff may have committed just after the last run read
EVENTS_RESCAN = timedelta(hours=1)


def _days(days: float) -> timedelta:
    return timedelta(days=days)


async def purge(conn: AsyncConnection, settings: Settings, now: datetime, *, runner: str) -> dict[str, Any] | None:
    """One background purge as the retention settings say, recorded; None when another
    process is purging."""
    db = RetentionDB.of(conn)
    async with conn.begin():
        if not await db.try_purge_lock():
            return None
    try:
        return await _purge_everything(conn, settings.retention, now, runner)
    finally:
        with contextlib.suppress(DatabaseError):  # a connection lost took its session's lock with it
            async with conn.begin():
                await db.release_purge_lock()


async def _purge_everything(
    conn: AsyncConnection, retention: RetentionSettings, now: datetime, runner: str
) -> dict[str, Any]:
    started = utcnow()
    jobs = dict.fromkeys(FINAL_STATUSES, 0)
    counts = {"events": 0, "request_ids": 0, "pilots": 0, "archived": 0}
    events_before, error = None, None
    try:
        for status in FINAL_STATUSES:
            jobs[status], archived = await _purge_jobs(conn, retention, status, now - _days(retention.days_of(status)))
            counts["archived"] += archived
        if retention.events_days is not None:
            events_before = now - _days(retention.events_days)
            counts["events"] = await _purge_events(conn, retention.batch_size, events_before)
        request_ids_before = now - timedelta(hours=retention.request_ids_hours)
        counts["request_ids"] = await _in_batches(conn, lambda db: db.delete_request_ids(request_ids_before,
                                                                                         retention.batch_size),
                                                  retention.batch_size)  # fmt: skip
        pilots_before = now - _days(retention.pilots_days)
        counts["pilots"] = await _in_batches(
            conn, lambda db: db.delete_pilots(pilots_before, retention.batch_size), retention.batch_size
        )
    except archive.ArchiveError as exc:
        error = f"purge stopped, nothing more deleted: {exc}"
        log.error("%s", error)
    return await _record(conn, {"runner": runner, "started_at": started, "jobs": jobs, **counts,
                                "events_before": events_before, "error": error})  # fmt: skip


async def _record(conn: AsyncConnection, run: dict[str, Any]) -> dict[str, Any]:
    run = {**run, "finished_at": utcnow()}
    async with conn.begin():
        db = RetentionDB.of(conn)
        run_id = await db.record_run(run)
        await db.prune_runs(run_id, KEEP_RUNS)
    return {k: v for k, v in run.items() if k != "events_before"}


async def _purge_jobs(
    conn: AsyncConnection, retention: RetentionSettings, status: str, before: datetime
) -> tuple[int, int]:
    """Delete the jobs in `status` finished before `before`, archived first when set:
    (deleted, archived)."""
    deleted = archived = 0
    directory = retention.archive_dir
    while True:
        async with conn.begin():
            db = RetentionDB.of(conn)
            ids = await db.finished_jobs(status, before, retention.batch_size)
            if ids and directory is not None:
                records = await db.archive_records(ids)
                archived += await asyncio.to_thread(archive.append, directory, _lines(records))
            gone = await db.delete_jobs(ids) if ids else 0
        deleted += gone
        JOBS_PURGED.labels(status=status).inc(gone)
        if len(ids) < retention.batch_size:
            return deleted, archived


def _lines(records: Iterable[dict[str, Any]]) -> list[tuple[datetime, bytes]]:
    return [(r["job"]["finished_at"], archive.line(r["job"], r["requirements"], r["payload"], r["events"]))
            for r in records]  # fmt: skip


async def _purge_events(conn: AsyncConnection, batch_size: int, before: datetime) -> int:
    """Delete the events of the jobs finished before `before`, from where the last run stopped."""
    async with read_transaction(conn):
        last = await RetentionDB.of(conn).events_purged_before()
    deleted = 0
    for status in FINAL_STATUSES:
        after = None if last is None else (last - EVENTS_RESCAN, 0)
        while True:
            async with conn.begin():
                db = RetentionDB.of(conn)
                found = await db.finished_after(status, after, before, batch_size)
                if found:
                    deleted += await db.delete_events([job_id for _, job_id in found])
            if len(found) < batch_size:
                break
            after = found[-1]
    return deleted


async def _in_batches(conn: AsyncConnection, step: Any, batch_size: int) -> int:
    """`step(db)` in its own transaction until it deletes fewer than a batch: the total."""
    deleted = 0
    while True:
        async with conn.begin():
            gone = await step(RetentionDB.of(conn))
        deleted += gone
        if gone < batch_size:
            return deleted


async def purge_jobs(
    conn: AsyncConnection, settings: Settings, older_than: timedelta, statuses: Iterable[str], *,
    dry_run: bool, runner: str,
) -> dict[str, Any]:  # fmt: skip
    """An admin's one-off purge of the jobs in `statuses` finished more than `older_than`
    ago, in batches and archived as the background purge does; a dry run only counts them."""
    retention = settings.retention
    before = utcnow() - older_than
    chosen = sorted(set(statuses))
    if dry_run:
        async with read_transaction(conn):
            db = RetentionDB.of(conn)
            counted = {status: await db.count_finished(status, before) for status in chosen}
        return {"dry_run": True, "finished_before": before, "jobs": counted, "archived": 0}
    started = utcnow()
    jobs, archived = dict.fromkeys(chosen, 0), 0
    try:
        for status in chosen:
            jobs[status], archived_now = await _purge_jobs(conn, retention, status, before)
            archived += archived_now
    except archive.ArchiveError as exc:
        error = f"purge stopped, nothing more deleted: {exc}"
        log.error("%s", error)
        await _record(conn, {"runner": runner, "started_at": started, "jobs": jobs, "events": 0, "request_ids": 0,
                             "pilots": 0, "archived": archived, "error": error})  # fmt: skip
        raise ArchiveUnavailable(error, jobs=jobs) from exc
    await _record(conn, {"runner": runner, "started_at": started, "jobs": jobs, "events": 0, "request_ids": 0,
                         "pilots": 0, "archived": archived, "error": None})  # fmt: skip
    return {"dry_run": False, "finished_before": before, "jobs": jobs, "archived": archived}


async def last_run(conn: AsyncConnection) -> dict[str, Any] | None:
    async with read_transaction(conn):
        return await RetentionDB.of(conn).last_run()
