"""The purge: finished jobs, their events, request ids and pilots past the retention settings.

Every batch is its own short transaction (fairmatch.db.retention), so claims and
status reports never wait behind a purge. The background purge runs in one
process at a time: a run records itself as started before its first batch, and
a replica that finds a run in progress (or, on schedule, one finished less than
half an interval ago) skips its turn. Only transaction-scoped locks: a PgBouncer
in transaction mode keeps the guarantee.
With `retention.archive_dir` each batch's jobs are appended to the archive
and synced before the batch's delete commits; an archive that cannot be
written stops the purge before it deletes another job.

After the deletions, the indexes grown far past what their entries need are
rebuilt (fairmatch.db.indexes says why they grow), one at a time and paced as
the batches are; an invalid copy left by a rebuild cut short is dropped first.

Nothing the priority policies read goes: usage charges and totals carry no
reference to a job's row, the running-job history counts samples, and only
final jobs (never Waiting, Matched, Running or Stalled) are deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.clock import utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.db.indexes import IndexDB
from fairmatch.db.retention import RetentionDB
from fairmatch.errors import ArchiveUnavailable
from fairmatch.jobs import archive
from fairmatch.jobs.lifecycle import FINAL
from fairmatch.metrics import INDEXES_REBUILT, JOBS_PURGED
from fairmatch.settings import RetentionSettings, Settings

log = logging.getLogger("fairmatch.retention")

KEEP_RUNS = 100  # the purge runs kept for GET /status and for operators
FINAL_STATUSES = sorted(status.value for status in FINAL)
# the events purge starts again this far before where the last one stopped: a job that
# finished just before that cutoff may have committed just after the last run read
EVENTS_RESCAN = timedelta(hours=1)


# a run not finished this long after it started is taken for one whose process died, and
# another replica purges. Were it still running, the two would only share the work: each
# batch skips the rows the other holds, and the archive's appends are locked.
STALE_RUN = timedelta(minutes=10)
SHUTDOWN = "purge stopped: the service shut down"  # a run cut short by a stop, recorded as such
MIB = 1 << 20


def _days(days: float) -> timedelta:
    return timedelta(days=days)


async def purge(
    conn: AsyncConnection, settings: Settings, now: datetime, *, runner: str, scheduled: bool = True
) -> dict[str, Any] | None:
    """One purge as the retention settings say, of what was due at `now`, recorded. None when
    another process is purging or, for a scheduled run, purged less than half an interval ago
    (so that N replicas purge about once an interval)."""
    started = utcnow()
    recent = started - timedelta(seconds=settings.retention.interval_seconds / 2) if scheduled else None
    run_id = await _start(conn, runner, started, running_since=started - STALE_RUN, finished_since=recent)
    if run_id is None:
        return None
    retention = settings.retention
    pace = _Pacer(retention.pause_factor)
    jobs = dict.fromkeys(FINAL_STATUSES, 0)
    counts = {"events": 0, "request_ids": 0, "pilots": 0, "archived": 0}
    events_before, error = None, None
    rebuilt: list[dict[str, Any]] = []
    try:
        for status in FINAL_STATUSES:
            due = now - _days(retention.days_of(status))
            jobs[status], archived = await _purge_jobs(conn, retention, status, due, pace)
            counts["archived"] += archived
        if retention.events_days is not None:
            events_before = now - _days(retention.events_days)
            counts["events"] = await _purge_events(conn, retention.batch_size, events_before, pace)
        request_ids_before = now - timedelta(hours=retention.request_ids_hours)
        counts["request_ids"] = await _in_batches(
            conn, lambda db: db.delete_request_ids(request_ids_before, retention.batch_size), retention.batch_size, pace
        )
        pilots_before = now - _days(retention.pilots_days)
        counts["pilots"] = await _in_batches(
            conn, lambda db: db.delete_pilots(pilots_before, retention.batch_size), retention.batch_size, pace
        )
        rebuilt = await _rebuild_bloated_indexes(conn, retention, pace)
    except archive.ArchiveError as exc:
        error = f"purge stopped, nothing more deleted: {exc}"
        log.error("%s", error)
    except Exception as exc:  # an outage: recorded if the database lets it, then the loop logs it
        with contextlib.suppress(Exception):
            await _finish(conn, run_id, {"jobs": jobs, **counts, "error": f"purge failed: {exc}"})
        raise
    except asyncio.CancelledError:  # a stop (a rolling restart): the next replica need not wait
        with contextlib.suppress(Exception):
            await _finish(conn, run_id, {"jobs": jobs, **counts, "error": SHUTDOWN})
        raise
    outcome = {"jobs": jobs, **counts, "events_before": events_before, "error": error, "indexes_rebuilt": rebuilt}
    return {"runner": runner, "started_at": started, **await _finish(conn, run_id, outcome)}


async def _start(
    conn: AsyncConnection, runner: str, started: datetime, *, running_since: datetime | None,
    finished_since: datetime | None,
) -> int | None:  # fmt: skip
    async with conn.begin():
        return await RetentionDB.of(conn).start_run(
            runner, started, running_since=running_since, finished_since=finished_since
        )


async def _finish(conn: AsyncConnection, run_id: int, outcome: dict[str, Any]) -> dict[str, Any]:
    """Record the run's outcome and forget the oldest runs; the outcome as shown."""
    outcome = {**outcome, "finished_at": utcnow()}
    async with conn.begin():
        db = RetentionDB.of(conn)
        await db.finish_run(run_id, outcome)
        await db.prune_runs(run_id, KEEP_RUNS)
    return {k: v for k, v in outcome.items() if k != "events_before"}


class _Pacer:
    """The pauses between a run's batches: before each, `factor` times as long as the
    batch before it took, so that the purge's backend is busy at most 1 / (1 + factor)
    of the run and claims and reports are not queued behind one batch after another."""

    def __init__(self, factor: float) -> None:
        self.factor, self._owed = factor, 0.0

    @contextlib.asynccontextmanager
    async def batch(self) -> AsyncIterator[None]:
        if self._owed > 0:
            await asyncio.sleep(self._owed)
        started = time.monotonic()
        yield
        self._owed = (time.monotonic() - started) * self.factor


async def _purge_jobs(
    conn: AsyncConnection, retention: RetentionSettings, status: str, before: datetime, pace: _Pacer
) -> tuple[int, int]:
    """Delete the jobs in `status` finished before `before`, archived first when set:
    (deleted, archived)."""
    deleted = archived = 0
    directory = retention.archive_dir
    while True:
        async with pace.batch(), conn.begin():
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


async def _purge_events(conn: AsyncConnection, batch_size: int, before: datetime, pace: _Pacer) -> int:
    """Delete the events of the jobs finished before `before`, from where the last run stopped."""
    async with read_transaction(conn):
        last = await RetentionDB.of(conn).events_purged_before()
    deleted = 0
    for status in FINAL_STATUSES:
        after = None if last is None else (last - EVENTS_RESCAN, 0)
        while True:
            async with pace.batch(), conn.begin():
                db = RetentionDB.of(conn)
                found = await db.finished_after(status, after, before, batch_size)
                if found:
                    deleted += await db.delete_events([job_id for _, job_id in found])
            if len(found) < batch_size:
                break
            after = found[-1]
    return deleted


async def _in_batches(conn: AsyncConnection, step: Any, batch_size: int, pace: _Pacer) -> int:
    """`step(db)` in its own transaction until it deletes fewer than a batch: the total."""
    deleted = 0
    while True:
        async with pace.batch(), conn.begin():
            gone = await step(RetentionDB.of(conn))
        deleted += gone
        if gone < batch_size:
            return deleted


async def _rebuild_bloated_indexes(
    conn: AsyncConnection, retention: RetentionSettings, pace: _Pacer
) -> list[dict[str, Any]]:
    """Rebuild the indexes `retention` finds bloated: each with its size before and after."""
    ratio = retention.index_rebuild_ratio
    if ratio == 0:
        return []
    async with read_transaction(conn):
        db = IndexDB.of(conn)
        leftovers, sizes = await db.leftovers(), await db.sizes()
    db = IndexDB.of(conn)
    for name in leftovers:
        log.warning("dropping %s, an invalid copy left by an index rebuild that did not finish", name)
        await db.drop(name)
    rebuilt = []
    for index in sizes:
        if not index.bloated(ratio, round(retention.index_rebuild_min_mb * MIB)):
            continue
        async with pace.batch():
            after = await db.rebuild(index.name)
        INDEXES_REBUILT.labels(index=index.name).inc()
        log.info("rebuilt index %s of %s: %.1f MiB, now %.1f MiB (its entries need about %.1f MiB)",
                 index.name, index.table, index.bytes / MIB, after / MIB, (index.needed_bytes or 0) / MIB)  # fmt: skip
        rebuilt.append({"index": index.name, "bytes_before": index.bytes, "bytes_after": after})
    return rebuilt


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
    run_id = await _start(conn, runner, started, running_since=None, finished_since=None)
    assert run_id is not None  # a one-off purge waits for the lock and always runs
    jobs, archived = dict.fromkeys(chosen, 0), 0
    error = None
    pace = _Pacer(retention.pause_factor)  # as the background purge: matching keeps its share meanwhile
    try:
        for status in chosen:
            jobs[status], archived_now = await _purge_jobs(conn, retention, status, before, pace)
            archived += archived_now
    except archive.ArchiveError as exc:
        error = f"purge stopped, nothing more deleted: {exc}"
        log.error("%s", error)
    except Exception as exc:  # an outage: recorded if the database lets it, then answered 503
        with contextlib.suppress(Exception):
            await _finish(conn, run_id, {"jobs": jobs, "archived": archived, "error": f"purge failed: {exc}"})
        raise
    await _finish(conn, run_id, {"jobs": jobs, "archived": archived, "error": error})
    if error is not None:
        raise ArchiveUnavailable(error, jobs=jobs)
    return {"dry_run": False, "finished_before": before, "jobs": jobs, "archived": archived}
