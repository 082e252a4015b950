"""The claim on SQLite, run in the driver's worker thread in one go.

aiosqlite runs the statements in a thread of its own; each statement is a
trip there and back (fairmatch/db/sqlite_driver.py), and a claim has nine of
them. Here the claim's statements run as one function in that thread, a
single trip. Values cross with the column types'
own bind and result processors, so what is written and read back is exactly
what SQLAlchemy would write and read.

The steps are those of the PostgreSQL statement (fairmatch/db/claims.py): the
candidates of the level (or the one job asked for), one drawn at random,
removed from tq_jobs, marked Matched, its event and idempotency key recorded, the
pilot that took it (when it names its reference) created or updated.
The caller's BEGIN IMMEDIATE holds the write lock, so nothing interleaves.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.errors import translated
from fairmatch.db.sqlite_driver import OneTripConnection
from fairmatch.db.tables import job_specs, jobs
from fairmatch.errors import DatabaseError

SITE_LIMITED = "SELECT EXISTS (SELECT 1 FROM site_limits WHERE site = :site)"
LEVEL_CANDIDATES = """
    SELECT job_id FROM tq_jobs
    WHERE tq_id = :tq_id AND real_priority = :level
    ORDER BY job_id
    LIMIT :candidates"""
NAMED_CANDIDATE = "SELECT job_id FROM tq_jobs WHERE tq_id = :tq_id AND job_id = :job_id"
JOBS_BEFORE = "SELECT count(*) FROM (SELECT 1 FROM tq_jobs WHERE tq_id = :tq_id LIMIT 2)"
REMOVE = "DELETE FROM tq_jobs WHERE job_id = :job_id"
MATCH = """
    UPDATE jobs
    SET status = :status,
        minor_status = :minor_status,
        site = :site,
        pilot_reference = :pilot_reference,
        grid_ce = :grid_ce,
        matched_by = :requester,
        matched_at = :now,
        lease_expires_at = :lease_until,
        finished_at = :finished_at,
        task_queue_id = :tq_id
    WHERE id = :job_id AND status = 'Waiting'
    RETURNING *"""
SPEC = "SELECT requirements, payload FROM job_specs WHERE job_id = :job_id"
EVENT = """
    INSERT INTO job_events (job_id, status, minor_status, at, source, by)
    VALUES (:job_id, :status, :minor_status, :now, 'match', :requester)"""
REQUEST = """
    INSERT INTO match_requests (requester, request_id, job_id, created_at, resource)
    VALUES (:requester, :request_id, :job_id, :now, :request_resource)"""
PILOT = """
    INSERT INTO pilots (reference, requester, site, grid_ce, benchmark, first_seen, last_seen,
                        matches, empty_matches, current_job_id)
    VALUES (:pilot_reference, :requester, :site, :grid_ce, :benchmark, :now, :now, 1, 0, :job_id)
    ON CONFLICT (reference) DO UPDATE
    SET requester = excluded.requester,
        site = excluded.site,
        grid_ce = excluded.grid_ce,
        benchmark = COALESCE(excluded.benchmark, pilots.benchmark),
        last_seen = excluded.last_seen,
        matches = pilots.matches + 1,
        current_job_id = excluded.current_job_id"""


# what the thread answers, as the PostgreSQL statement does: the jobs row's columns with its
# spec's requirements and payload (`id` None when nothing was claimed), and the probes
# site_limited, level_left, jobs_before
Outcome = dict[str, Any]


def _missed(*, site_limited: bool = False, level_left: bool = True) -> Outcome:
    return {"id": None, "site_limited": site_limited, "level_left": level_left, "jobs_before": 0}


def _steps(db: sqlite3.Connection, params: dict[str, Any], named: bool, draw: float) -> Outcome:
    """The claim's statements, inside the transaction open on `db`."""
    if not params["guarded"] and db.execute(SITE_LIMITED, params).fetchone()[0]:
        return _missed(site_limited=True)
    ids = [row[0] for row in db.execute(NAMED_CANDIDATE if named else LEVEL_CANDIDATES, params)]
    if not ids:
        return _missed(level_left=False)  # the write lock is ours: nobody else holds a candidate
    job_id = ids[int(draw * len(ids))]
    jobs_before = db.execute(JOBS_BEFORE, params).fetchone()[0]
    mine = {**params, "job_id": job_id}
    db.execute(REMOVE, mine)
    cursor = db.execute(MATCH, mine)
    values = cursor.fetchone()
    if values is None:
        return _missed()  # no longer Waiting: its stale queue entry is gone with the claim
    row = dict(zip((d[0] for d in cursor.description), values))
    row["requirements"], row["payload"] = db.execute(SPEC, mine).fetchone()
    db.execute(EVENT, mine)
    if params["request_id"] is not None:
        db.execute(REQUEST, mine)
    if params["pilot_reference"] is not None and params["site"] is not None:  # a pilot is on record at its site
        db.execute(PILOT, mine)
    return {**row, "site_limited": False, "level_left": True, "jobs_before": jobs_before}


def _in_thread(db: sqlite3.Connection, params: dict[str, Any], named: bool, draw: float, own: bool) -> Outcome:
    """The steps; with `own`, in a BEGIN IMMEDIATE transaction of their own."""
    if not own:
        return _steps(db, params, named, draw)
    db.execute("BEGIN IMMEDIATE")
    try:
        outcome = _steps(db, params, named, draw)
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return outcome


class Codec:
    """The column types' processors for what the claim binds and reads back."""

    def __init__(self, dialect: Dialect) -> None:
        stamp = jobs.c.matched_at.type.dialect_impl(dialect)
        self._stamp: Callable[[datetime], Any] = stamp.bind_processor(dialect) or (lambda value: value)
        self._columns = {
            c.name: c.type.dialect_impl(dialect).result_processor(dialect, None)
            for c in (*jobs.columns, *job_specs.columns)
        }

    def bind(self, params: dict[str, Any]) -> dict[str, Any]:
        stamps = ("now", "lease_until", "finished_at")
        return {**params, **{name: None if params[name] is None else self._stamp(params[name]) for name in stamps}}

    def row(self, values: Outcome) -> Outcome:
        """The jobs columns as SQLAlchemy reads them; the probes as they are."""
        processed = {}
        for name, value in values.items():
            process = self._columns.get(name)
            processed[name] = process(value) if process is not None else value
        return processed


_CODECS: dict[str, Codec] = {}


async def claim_in_thread(
    conn: AsyncConnection, params: dict[str, Any], *, named: bool, draw: float, own_transaction: bool
) -> Outcome:
    """Run the claim in aiosqlite's worker thread; the jobs row comes back as SQLAlchemy reads it.

    With `own_transaction` the claim is its own BEGIN IMMEDIATE transaction; without, it
    runs inside the one the caller opened on `conn`. `draw` in [0, 1) picks the candidate.
    """
    codec = _CODECS.get(conn.dialect.name)
    if codec is None:
        codec = _CODECS[conn.dialect.name] = Codec(conn.dialect)
    driver = (await conn.get_raw_connection()).driver_connection
    assert isinstance(driver, OneTripConnection)
    try:
        outcome = await driver.on_thread(_in_thread, codec.bind(params), named, draw, own_transaction)
    except sqlite3.Error as exc:  # as the engine would raise it: outages answer 503 as elsewhere
        raise (translated(DBAPIError.instance(None, None, exc, sqlite3.Error)) or DatabaseError(str(exc))) from exc
    return codec.row(outcome) if outcome["id"] is not None else outcome
