"""Claiming one waiting job of a task queue, atomically.

PostgreSQL: a single statement. The candidates (the lowest `jobs_per_try`
ids at the drawn user-priority level) are ordered at random and the first
one nobody else holds is locked (`FOR UPDATE SKIP LOCKED` under a LIMIT 1:
exactly one row is locked, locked rows are passed over, never waited for).
It is then removed from tq_jobs, marked Matched, its event and idempotency
key recorded - all or nothing, committed before the answer leaves.

SQLite: the same steps inside one BEGIN IMMEDIATE transaction, which holds
the database write lock, so no other claim can interleave.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.dialect import is_postgresql
from app.db.tables import job_events, jobs, match_requests, tq_jobs
from app.jobs.lifecycle import JobStatus


@dataclass(frozen=True, slots=True)
class ClaimTarget:
    """Where to claim from: a user-priority level of a TQ, or one named job."""

    tq_id: int
    level: float | None = None
    job_id: int | None = None
    candidates: int = 10


@dataclass(frozen=True, slots=True)
class Claimed:
    job: Any  # the jobs row after the claim
    tq_now_empty: bool


@dataclass(frozen=True, slots=True)
class Refused:
    """The claimed job broke a site limit; its claim was rolled back."""

    reasons: list[dict[str, Any]]


# Checks the claimed job inside the claim's transaction; a non-empty answer refuses it.
Guard = Callable[[AsyncConnection, Any], Awaitable[list[dict[str, Any]]]]


_LEVEL_CANDIDATES = """
        SELECT job_id FROM tq_jobs
        WHERE tq_id = :tq_id AND real_priority = :level
        ORDER BY job_id
        LIMIT :candidates"""

_NAMED_CANDIDATE = """
        SELECT job_id FROM tq_jobs
        WHERE tq_id = :tq_id AND job_id = :job_id"""

_CLAIM_SQL = """
WITH picked AS MATERIALIZED (
    SELECT t.job_id
    FROM tq_jobs AS t
    WHERE t.job_id IN ({candidates})
    ORDER BY random()
    LIMIT 1
    FOR UPDATE OF t SKIP LOCKED
), removed AS (
    DELETE FROM tq_jobs AS t
    USING picked
    WHERE t.job_id = picked.job_id
    RETURNING t.job_id
), matched AS (
    UPDATE jobs
    SET status = 'Matched',
        site = :site,
        pilot_reference = :pilot_reference,
        matched_by = :requester,
        matched_at = :now,
        lease_expires_at = :lease_until,
        task_queue_id = :tq_id
    FROM removed
    WHERE jobs.id = removed.job_id AND jobs.status = 'Waiting'
    RETURNING jobs.*
), event AS (
    INSERT INTO job_events (job_id, status, at, source)
    SELECT id, 'Matched', :now, 'match' FROM matched
), request AS (
    INSERT INTO match_requests (requester, request_id, job_id, created_at)
    SELECT :requester, CAST(:request_id AS varchar), id, :now FROM matched
    WHERE CAST(:request_id AS varchar) IS NOT NULL
)
SELECT matched.*,
       -- jobs in the TQ before this claim (this statement cannot see its own delete)
       (SELECT count(*) FROM (SELECT 1 FROM tq_jobs WHERE tq_id = :tq_id LIMIT 2) AS s) AS jobs_before
FROM matched
"""

CLAIM_LEVEL = text(_CLAIM_SQL.format(candidates=_LEVEL_CANDIDATES))
CLAIM_NAMED = text(_CLAIM_SQL.format(candidates=_NAMED_CANDIDATE))


async def level_weights(conn: AsyncConnection, tq_id: int) -> list[tuple[float, int]]:
    """(real priority, number of jobs) per user-priority level of the TQ."""
    stmt = (
        select(tq_jobs.c.real_priority, func.count())
        .where(tq_jobs.c.tq_id == tq_id)
        .group_by(tq_jobs.c.real_priority)
        .order_by(tq_jobs.c.real_priority)
    )
    return [(float(p), int(n)) for p, n in (await conn.execute(stmt)).all()]


async def claim(
    conn: AsyncConnection,
    target: ClaimTarget,
    *,
    site: str,
    pilot_reference: str | None,
    requester: str,
    request_id: str | None,
    now: datetime,
    lease_until: datetime,
    rng: random.Random,
    guard: Guard | None = None,
) -> Claimed | Refused | None:
    """Claim one job in its own transaction; None if the pick was lost or the TQ ran dry."""
    params = {
        "tq_id": target.tq_id,
        "level": target.level,
        "job_id": target.job_id,
        "candidates": target.candidates,
        "site": site,
        "pilot_reference": pilot_reference,
        "requester": requester,
        "request_id": request_id,
        "now": now,
        "lease_until": lease_until,
    }
    async with conn.begin() as transaction:
        if is_postgresql(conn):
            statement = CLAIM_NAMED if target.job_id is not None else CLAIM_LEVEL
            row = (await conn.execute(statement, params)).first()
            claimed = None if row is None else Claimed(job=row, tq_now_empty=row.jobs_before <= 1)
        else:
            claimed = await _claim_serialised(conn, target, params, rng)
        if claimed is not None and guard is not None:
            reasons = await guard(conn, claimed.job)
            if reasons:
                await transaction.rollback()
                return Refused(reasons)
    return claimed


async def _claim_serialised(
    conn: AsyncConnection, target: ClaimTarget, params: dict[str, Any], rng: random.Random
) -> Claimed | None:
    candidates = select(tq_jobs.c.job_id).where(tq_jobs.c.tq_id == target.tq_id)
    if target.job_id is not None:
        candidates = candidates.where(tq_jobs.c.job_id == target.job_id)
    else:
        candidates = (
            candidates.where(tq_jobs.c.real_priority == target.level)
            .order_by(tq_jobs.c.job_id)
            .limit(target.candidates)
        )
    ids = (await conn.execute(candidates)).scalars().all()
    if not ids:
        return None
    job_id = rng.choice(ids)
    jobs_before = (
        await conn.execute(
            select(func.count()).select_from(
                select(tq_jobs.c.job_id).where(tq_jobs.c.tq_id == target.tq_id).limit(2).subquery()
            )
        )
    ).scalar_one()
    await conn.execute(delete(tq_jobs).where(tq_jobs.c.job_id == job_id))
    row = (
        await conn.execute(
            update(jobs)
            .where(jobs.c.id == job_id, jobs.c.status == JobStatus.Waiting.value)
            .values(
                status=JobStatus.Matched.value,
                site=params["site"],
                pilot_reference=params["pilot_reference"],
                matched_by=params["requester"],
                matched_at=params["now"],
                lease_expires_at=params["lease_until"],
                task_queue_id=target.tq_id,
            )
            .returning(jobs)
        )
    ).first()
    if row is None:
        return None
    await conn.execute(
        insert(job_events).values(
            job_id=job_id, status=JobStatus.Matched.value, at=params["now"], source="match"
        )
    )
    if params["request_id"] is not None:
        await conn.execute(
            insert(match_requests).values(
                requester=params["requester"],
                request_id=params["request_id"],
                job_id=job_id,
                created_at=params["now"],
            )
        )
    return Claimed(job=row, tq_now_empty=jobs_before <= 1)
