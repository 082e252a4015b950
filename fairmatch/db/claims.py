"""Claiming one waiting job of a task queue, atomically.

PostgreSQL: one statement. The candidates (the lowest `candidates` ids of
the drawn user-priority level, or the one job asked for) are ordered at
random and the first one nobody else holds is locked (`FOR UPDATE SKIP
LOCKED` under a LIMIT 1: exactly one row is locked, locked rows are passed
over, never waited for). It is then removed from tq_jobs, marked Matched (or
HandedOff, final and without a lease, when the request hands it off), its event and idempotency key recorded, the pilot that took it (when it names its
reference) created or updated in `pilots` - all or nothing, committed before
the answer leaves. It writes the job's narrow state row only; the answer reads
the requirements and payload from job_specs, which a claim never writes. It runs on the driver's own connection (fairmatch/db/raw.py),
and the claims of concurrent requests of a process share a round trip and a
commit (fairmatch/db/batches.py), with the status reports. A claim checked against site limits
runs in the request's own transaction instead, with the check.

SQLite: the same steps inside one BEGIN IMMEDIATE transaction, which holds
the database write lock, so no other claim can interleave; they run in the
driver's worker thread in one go (fairmatch/db/sqlite_claim.py).

With site limits in the target, the claimed job is checked against them in
the claim's own transaction, and the claim rolled back if it breaks one.

Both classes implement the match's claim port (`fairmatch.matching.matcher.Claims`);
tests/db/test_claim_contract.py runs the same cases against both and the simulator's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.clock import utcnow
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.batches import Batches
from fairmatch.db.limits import LimitDB
from fairmatch.db.raw import Row
from fairmatch.db.sqlite_claim import claim_in_thread
from fairmatch.db.tables import job_specs, jobs, match_requests, tq_jobs
from fairmatch.errors import DuplicateRequest, UniqueViolation
from fairmatch.jobs.lifecycle import ASSIGNED, JobStatus
from fairmatch.limits.rules import SiteLimits
from fairmatch.matching.matcher import Claimed, ClaimTarget, Missed, Outcome, Refused


@dataclass(frozen=True, slots=True)
class Claimant:
    """Who claims, as a claim records it on the job."""

    site: str | None  # None: a hand-off that names no site (no pilot goes on record then)
    pilot_reference: str | None
    grid_ce: str | None  # the CE the pilot runs behind, when it names exactly one
    requester: str  # the caller's identity; it scopes request ids
    request_id: str | None
    lease_seconds: int  # how long the match holds without a report from the pilot
    benchmark: float | None = None  # the pilot's own measure of its CPU (PilotBenchmark)
    # the request's matching fields as JSON, kept with its request id (None without one)
    request_resource: str | None = None
    # the job leaves for good (HandedOff, final, no lease) instead of being Matched
    handoff: bool = False


_LEVEL_CANDIDATES = """
        SELECT job_id FROM tq_jobs
        WHERE tq_id = %(tq_id)s AND real_priority = %(level)s
        ORDER BY job_id
        LIMIT %(candidates)s"""

_NAMED_CANDIDATE = """
        SELECT job_id FROM tq_jobs
        WHERE tq_id = %(tq_id)s AND job_id = %(job_id)s"""

# Text with fixed placeholders; every value is bound. The probes at the end read
# the queue as it was before this statement's own delete, each only when its answer
# is needed (an uncorrelated subquery runs when first reached).
_CLAIM_SQL = """
WITH picked AS MATERIALIZED (
    SELECT t.job_id
    FROM tq_jobs AS t
    WHERE t.job_id IN ({candidates})
      -- a claim without a site-limit guard only runs where no limit applies
      AND (%(guarded)s OR NOT EXISTS (SELECT 1 FROM site_limits WHERE site = %(site)s))
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
    SET status = %(status)s,
        minor_status = %(minor_status)s,
        site = %(site)s,
        pilot_reference = %(pilot_reference)s,
        grid_ce = %(grid_ce)s,
        matched_by = %(requester)s,
        matched_at = %(now)s,
        lease_expires_at = %(lease_until)s,
        finished_at = %(finished_at)s,
        task_queue_id = %(tq_id)s
    FROM removed
    WHERE jobs.id = removed.job_id AND jobs.status = 'Waiting'
    RETURNING jobs.*
), event AS (
    INSERT INTO job_events (job_id, status, minor_status, at, source, by)
    SELECT id, %(status)s, CAST(%(minor_status)s AS varchar), %(now)s, 'match', %(requester)s FROM matched
), request AS (
    INSERT INTO match_requests (requester, request_id, job_id, created_at, resource)
    SELECT %(requester)s, CAST(%(request_id)s AS varchar), id, %(now)s, CAST(%(request_resource)s AS json) FROM matched
    WHERE CAST(%(request_id)s AS varchar) IS NOT NULL
), pilot AS (
    INSERT INTO pilots AS p (reference, requester, site, grid_ce, benchmark, first_seen, last_seen,
                             matches, empty_matches, current_job_id)
    SELECT CAST(%(pilot_reference)s AS varchar), %(requester)s, %(site)s, %(grid_ce)s,
           CAST(%(benchmark)s AS float8), %(now)s, %(now)s, 1, 0, id
    FROM matched
    WHERE CAST(%(pilot_reference)s AS varchar) IS NOT NULL AND CAST(%(site)s AS varchar) IS NOT NULL
    ON CONFLICT (reference) DO UPDATE
    SET requester = excluded.requester,
        site = excluded.site,
        grid_ce = excluded.grid_ce,
        benchmark = COALESCE(excluded.benchmark, p.benchmark),
        last_seen = excluded.last_seen,
        matches = p.matches + 1,
        current_job_id = excluded.current_job_id
)
SELECT matched.*, spec.requirements, spec.payload,
       CASE WHEN matched.id IS NULL THEN
           EXISTS (SELECT 1 FROM site_limits WHERE site = %(site)s) END AS site_limited,
       CASE WHEN matched.id IS NULL THEN
           EXISTS (SELECT 1 FROM tq_jobs
                   WHERE tq_id = %(tq_id)s AND real_priority = CAST(%(level)s AS float8)) END AS level_left,
       CASE WHEN matched.id IS NOT NULL THEN
           (SELECT count(*) FROM (SELECT 1 FROM tq_jobs WHERE tq_id = %(tq_id)s LIMIT 2) AS s) END AS jobs_before
FROM (SELECT 1) AS one
LEFT JOIN matched ON true
LEFT JOIN job_specs AS spec ON spec.job_id = matched.id
"""

CLAIM_LEVEL = _CLAIM_SQL.format(candidates=_LEVEL_CANDIDATES)
CLAIM_NAMED = _CLAIM_SQL.format(candidates=_NAMED_CANDIDATE)


class ClaimDB(AreaDB):
    """Claims: the one job a match takes, and where a waiting job waits.

    `claim` opens its own transaction (the claim is one atomic step, on
    PostgreSQL one autocommitted statement); the other methods run in the caller's.
    """

    claimant: Claimant
    rng: random.Random
    batches: Batches
    on_batch: Callable[[int], None] | None = None

    @classmethod
    def claiming(
        cls,
        conn: AsyncConnection,
        claimant: Claimant,
        rng: random.Random,
        batches: Batches,
        on_batch: Callable[[int], None] | None = None,
    ) -> ClaimDB:
        """The claim port of this connection's backend, for one claimant. The claims share
        round trips in the process's `batches` (PostgreSQL); `on_batch` hears how many each
        carried."""
        claims = cls.of(conn)
        claims.claimant, claims.rng, claims.batches, claims.on_batch = claimant, rng, batches, on_batch
        return claims

    async def claim(self, target: ClaimTarget) -> Outcome:
        """Claim one job of the target in a transaction of its own; with limits, only if it passes."""
        now = utcnow()
        who = self.claimant
        params = {
            "tq_id": target.tq_id,
            "level": target.level,
            "job_id": target.job_id,
            "candidates": target.candidates,
            "site": who.site,
            "pilot_reference": who.pilot_reference,
            "grid_ce": who.grid_ce,
            "benchmark": who.benchmark,
            "requester": who.requester,
            "request_id": who.request_id,
            "request_resource": who.request_resource,
            "now": now,
            "status": (JobStatus.HandedOff if who.handoff else JobStatus.Matched).value,
            "minor_status": ASSIGNED,
            "lease_until": None if who.handoff else now + timedelta(seconds=who.lease_seconds),
            "finished_at": now if who.handoff else None,
            "guarded": target.limits is not None,
        }
        try:
            if target.limits is None:
                return await self._claim_alone(target, params)
            async with self.conn.begin() as transaction:
                outcome = await self._claim_step(target, params)
                if isinstance(outcome, Claimed):
                    assert isinstance(target.limits, SiteLimits) and who.site is not None  # limits are a site's
                    reasons = await LimitDB.of(self.conn).admit(target.limits, who.site, outcome.job, now)
                    if reasons:
                        await transaction.rollback()
                        return Refused(reasons)
            return outcome
        except UniqueViolation as exc:  # the only unique key a claim writes is the request id's
            raise DuplicateRequest(f"request_id {who.request_id!r} was claimed by another request") from exc

    async def _claim_alone(self, target: ClaimTarget, params: dict[str, Any]) -> Claimed | Missed:
        """A claim without limits, as its own transaction (PostgreSQL: in the process's next batch)."""
        raise NotImplementedError

    async def _claim_step(self, target: ClaimTarget, params: dict[str, Any]) -> Claimed | Missed:
        """The claim's statements, inside the transaction open on the connection."""
        raise NotImplementedError

    async def previous_match(self, requester: str, request_id: str) -> Any | None:
        """The job (state and spec) a request id of this requester already claimed, if any,
        with the matching fields it was `asked` with (None when they were not recorded)."""
        stmt = (
            select(jobs, job_specs.c.requirements, job_specs.c.payload, match_requests.c.resource.label("asked"))
            .join(match_requests, match_requests.c.job_id == jobs.c.id)
            .join(job_specs, job_specs.c.job_id == jobs.c.id)
            .where(match_requests.c.requester == requester, match_requests.c.request_id == request_id)
        )
        return (await self.conn.execute(stmt)).first()

    async def queue_of(self, job_id: int) -> tuple[int, float] | None:
        """(TQ, level) of a waiting job; None when it is not waiting."""
        row = (
            await self.conn.execute(select(tq_jobs.c.tq_id, tq_jobs.c.real_priority).where(tq_jobs.c.job_id == job_id))
        ).first()
        return None if row is None else (row.tq_id, float(row.real_priority))


class PostgresClaimDB(PostgresStatements, ClaimDB, dialect="postgresql"):
    async def _claim_alone(self, target: ClaimTarget, params: dict[str, Any]) -> Claimed | Missed:
        row = await self.batches.run(self.conn, _statement(target), params, self.on_batch)
        return _outcome(row)

    async def _claim_step(self, target: ClaimTarget, params: dict[str, Any]) -> Claimed | Missed:
        return _outcome((await self.conn.exec_driver_sql(_statement(target), params)).one())


class SQLiteClaimDB(SQLiteStatements, ClaimDB, dialect="sqlite"):
    async def _claim_alone(self, target: ClaimTarget, params: dict[str, Any]) -> Claimed | Missed:
        return await self._in_thread(target, params, own_transaction=True)

    async def _claim_step(self, target: ClaimTarget, params: dict[str, Any]) -> Claimed | Missed:
        return await self._in_thread(target, params, own_transaction=False)

    async def _in_thread(
        self, target: ClaimTarget, params: dict[str, Any], *, own_transaction: bool
    ) -> Claimed | Missed:
        named = target.job_id is not None
        draw = self.rng.random()
        row = await claim_in_thread(self.conn, params, named=named, draw=draw, own_transaction=own_transaction)
        return _outcome(Row(row))


def _statement(target: ClaimTarget) -> str:
    return CLAIM_NAMED if target.job_id is not None else CLAIM_LEVEL


def _outcome(row: Any) -> Claimed | Missed:
    if row.id is None:
        return Missed(level_empty=not row.level_left, site_limited=row.site_limited)
    return Claimed(job=row, tq_now_empty=row.jobs_before <= 1)
