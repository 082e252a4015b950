"""Claiming one waiting job of a task queue, atomically.

PostgreSQL: one statement. The candidates (the lowest `candidates` ids of
the drawn user-priority level, or the one job asked for) are ordered at
random and the first one nobody else holds is locked (`FOR UPDATE SKIP
LOCKED` under a LIMIT 1: exactly one row is locked, locked rows are passed
over, never waited for). It is then removed from tq_jobs, marked Matched (or
HandedOff, final and without a lease, when the request hands it off), its
event and idempotency key recorded, the pilot that took it (when it names its
reference) created or updated in `pilots` - all or nothing, committed before
the answer leaves. It writes the job's narrow state row only; the answer reads
the requirements and payload from job_specs, which a claim never writes. It
runs on the driver's own connection (fairmatch/db/raw.py), and the claims of
concurrent requests of a process share a round trip and a commit
(fairmatch/db/batches.py), with the status reports. A claim checked against
site limits runs in the request's own transaction instead, with the check.

SQLite: the same steps as a few statements in one BEGIN IMMEDIATE transaction,
which holds the database write lock, so no other claim can interleave. The
candidate is drawn with the match's own random generator: its draw is bound
into the statement that removes the job from tq_jobs.

What a claim writes is declared once for both: the jobs columns it sets
(`CLAIM_SETS`, their values computed in `ClaimDB.claim`) and the pilot's
record (fairmatch/db/pilots.py).

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

from sqlalchemy import (
    Boolean,
    Float,
    Integer,
    String,
    bindparam,
    cast,
    column,
    delete,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    table,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.expression import ColumnElement, FromClause

from fairmatch.clock import utcnow
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.batches import Batches
from fairmatch.db.limits import LimitDB
from fairmatch.db.pilots import claimed_by_pilot
from fairmatch.db.tables import job_events, job_specs, jobs, match_requests, site_limits, tq_jobs
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


# The jobs columns a claim sets, each with the claim parameter that holds its value
# (`ClaimDB.claim` computes them): rendered into both backends' statements.
CLAIM_SETS = {
    "status": "status",
    "minor_status": "minor_status",
    "site": "site",
    "pilot_reference": "pilot_reference",
    "grid_ce": "grid_ce",
    "matched_by": "requester",
    "matched_at": "now",
    "lease_expires_at": "lease_until",
    "finished_at": "finished_at",
    "task_queue_id": "tq_id",
}

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
    SET {sets}
    FROM removed
    WHERE jobs.id = removed.job_id AND jobs.status = 'Waiting'
    RETURNING jobs.*
), event AS (
    {event}
), request AS (
    {request}
), pilot AS (
    {pilot}
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


def _postgresql_claim(candidates: str) -> str:
    """The claim statement with these candidates: the jobs columns of CLAIM_SETS; the job's
    event, the request's record and the pilot's, as SQLite's claim writes them, compiled for
    psycopg (their parameters are the claim's, by name)."""
    claimed: ColumnElement[Any] = column("id")
    matched = table("matched")

    def compiled(statement: Any) -> str:
        return str(statement.compile(dialect=psycopg_dialect()))

    return _CLAIM_SQL.format(
        candidates=candidates,
        sets=",\n        ".join(f"{name} = %({param})s" for name, param in CLAIM_SETS.items()),
        event=compiled(_claim_event(claimed, matched)),
        request=compiled(_claim_request(claimed, matched)),
        pilot=compiled(claimed_by_pilot(postgresql.insert, claimed, matched)),
    )


def _claim_event(job_id: ColumnElement[Any], *source: FromClause) -> Any:
    """The claimed job's event (`job_id` read from `source`, if any); its values are the
    claim's parameters (status, minor_status, now, requester)."""
    values = select(
        job_id,
        bindparam("status", type_=job_events.c.status.type),
        bindparam("minor_status", type_=job_events.c.minor_status.type),
        bindparam("now", type_=job_events.c.at.type),
        literal_column("'match'"),
        bindparam("requester", type_=job_events.c.by.type),
    ).select_from(*source)
    return insert(job_events).from_select(["job_id", "status", "minor_status", "at", "source", "by"], values)


def _claim_request(job_id: ColumnElement[Any], *source: FromClause) -> Any:
    """The match's request id and what it asked, kept to answer its retries with the same job;
    nothing when the request carries no id. The asked fields arrive as JSON text."""
    request_id = bindparam("request_id", type_=match_requests.c.request_id.type)
    values = (
        select(
            bindparam("requester", type_=match_requests.c.requester.type),
            request_id,
            job_id,
            bindparam("now", type_=match_requests.c.created_at.type),
            # SQLite stores the text as it is (a CAST to JSON there is a number)
            cast(
                bindparam("request_resource", type_=String),
                match_requests.c.resource.type.with_variant(String(), "sqlite"),
            ),
        )
        .select_from(*source)
        .where(request_id.is_not(None))
    )
    columns = ["requester", "request_id", "job_id", "created_at", "resource"]
    return insert(match_requests).from_select(columns, values)


CLAIM_LEVEL = _postgresql_claim(_LEVEL_CANDIDATES)
CLAIM_NAMED = _postgresql_claim(_NAMED_CANDIDATE)


def _candidates(named: bool) -> Any:
    """The SQLite claim's candidates, as the PostgreSQL statement's: the level's lowest ids, or the named job."""
    stmt = select(tq_jobs.c.job_id).where(tq_jobs.c.tq_id == bindparam("tq_id"))
    if named:
        return stmt.where(tq_jobs.c.job_id == bindparam("job_id"))
    return (
        stmt.where(tq_jobs.c.real_priority == bindparam("level", type_=Float))
        .order_by(tq_jobs.c.job_id)
        .limit(bindparam("candidates", type_=Integer))
    )


_SITE_LIMITED = exists().where(site_limits.c.site == bindparam("site"))


def _removing(named: bool) -> Any:
    """The SQLite claim's first step: the candidate at `draw` (in [0, 1)) of the candidates in id
    order removed from tq_jobs, its id returned; none when the site has limits and the claim is
    not guarded (a claim without a site-limit guard only runs where no limit applies)."""
    candidates = _candidates(named).subquery()
    count = select(func.count()).select_from(candidates).scalar_subquery()
    drawn = (
        select(candidates.c.job_id)
        .where(or_(bindparam("guarded", type_=Boolean), ~_SITE_LIMITED))
        .order_by(candidates.c.job_id)
        .limit(1)
        .offset(cast(bindparam("draw", type_=Float) * count, Integer))
    )
    return delete(tq_jobs).where(tq_jobs.c.job_id == drawn.scalar_subquery()).returning(tq_jobs.c.job_id)


def _spec(name: str) -> Any:
    return select(job_specs.c[name]).where(job_specs.c.job_id == jobs.c.id).correlate(jobs).scalar_subquery()


_CLAIMED = bindparam("claimed", type_=jobs.c.id.type)
_SQLITE_REMOVE = {named: _removing(named) for named in (False, True)}
# the job marked as claimed, with its spec and whether its queue is now empty (the job is out of it)
_SQLITE_MATCH = (
    update(jobs)
    .where(jobs.c.id == _CLAIMED, jobs.c.status == JobStatus.Waiting.value)
    .values({name: bindparam(param, type_=jobs.c[name].type) for name, param in CLAIM_SETS.items()})
    .returning(
        *jobs.c,
        _spec("requirements").label("requirements"),
        _spec("payload").label("payload"),
        ~exists().where(tq_jobs.c.tq_id == bindparam("tq_id")).label("tq_now_empty"),
    )
)
_SQLITE_EVENT = _claim_event(_CLAIMED)
_SQLITE_REQUEST = _claim_request(_CLAIMED)
_SQLITE_PILOT = claimed_by_pilot(sqlite.insert, _CLAIMED)
# why nothing was claimed: the probes of the PostgreSQL statement
_SQLITE_MISSED = select(
    _SITE_LIMITED.label("site_limited"),
    exists()
    .where(tq_jobs.c.tq_id == bindparam("tq_id"), tq_jobs.c.real_priority == bindparam("level", type_=Float))
    .label("level_left"),
)


@dataclass(frozen=True, slots=True)
class Claiming:
    """One match's claims: who claims, the generator the candidate is drawn with, and who hears
    how many claims each shared round trip carried (PostgreSQL)."""

    claimant: Claimant
    rng: random.Random
    batches: Batches  # the process's shared round trips (PostgreSQL)
    on_batch: Callable[[int], None] | None = None


class ClaimDB(AreaDB):
    """Claims: the one job a match takes, and where a waiting job waits.

    `claim` opens its own transaction (the claim is one atomic step, on
    PostgreSQL one autocommitted statement); the other methods run in the caller's.
    """

    def __init__(self, conn: AsyncConnection, claiming: Claiming | None = None) -> None:
        super().__init__(conn)
        self._claiming = claiming

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
        return cls._backends[conn.dialect.name](conn, Claiming(claimant, rng, batches, on_batch))

    @property
    def _setup(self) -> Claiming:
        if self._claiming is None:
            raise TypeError("a claim needs its claimant: ClaimDB.claiming(conn, claimant, rng, batches)")
        return self._claiming

    async def claim(self, target: ClaimTarget) -> Outcome:
        """Claim one job of the target in a transaction of its own; with limits, only if it passes."""
        now = utcnow()
        who = self._setup.claimant
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
        setup = self._setup
        row = await setup.batches.run(self.conn, _statement(target), params, setup.on_batch)
        return _outcome(row)

    async def _claim_step(self, target: ClaimTarget, params: dict[str, Any]) -> Claimed | Missed:
        return _outcome((await self.conn.exec_driver_sql(_statement(target), params)).one())


class SQLiteClaimDB(SQLiteStatements, ClaimDB, dialect="sqlite"):
    async def _claim_alone(self, target: ClaimTarget, params: dict[str, Any]) -> Claimed | Missed:
        async with self.conn.begin():  # BEGIN IMMEDIATE: the write lock, for the whole claim
            return await self._claim_step(target, params)

    async def _claim_step(self, target: ClaimTarget, params: dict[str, Any]) -> Claimed | Missed:
        params = {**params, "draw": self._setup.rng.random()}
        removed = (await self.conn.execute(_SQLITE_REMOVE[target.job_id is not None], params)).scalar()
        if removed is not None:
            params["claimed"] = removed
            job = (await self.conn.execute(_SQLITE_MATCH, params)).first()
            if job is not None:
                await self.conn.execute(_SQLITE_EVENT, params)
                if params["request_id"] is not None:  # the statement would insert nothing
                    await self.conn.execute(_SQLITE_REQUEST, params)
                await self.conn.execute(_SQLITE_PILOT, params)
                return Claimed(job=job, tq_now_empty=job.tq_now_empty)
            # no longer Waiting: its stale queue entry is gone with the claim
        probes = (await self.conn.execute(_SQLITE_MISSED, params)).one()
        return Missed(level_empty=not probes.level_left, site_limited=probes.site_limited)


def _statement(target: ClaimTarget) -> str:
    return CLAIM_NAMED if target.job_id is not None else CLAIM_LEVEL


def _outcome(row: Any) -> Claimed | Missed:
    if row.id is None:
        return Missed(level_empty=not row.level_left, site_limited=row.site_limited)
    return Claimed(job=row, tq_now_empty=row.jobs_before <= 1)
