"""Match a resource to one job, or explain what it could match."""

from __future__ import annotations

import logging
import random
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.clock import utcnow
from app.db.dialect import is_postgresql
from app.db.engine import read_transaction
from app.db.tables import jobs, match_requests
from app.jobs.store import job_dict, lease_until
from app.limits import store as limit_store
from app.limits.rules import SiteLimits, with_banned
from app.matching.choice import Candidate, chances, choose
from app.matching.claim import ClaimTarget, Guard, Refused, claim, level_weights
from app.matching.eligibility import eligible_task_queues
from app.matching import one_statement
from app.matching.lottery import draw
from app.matching.resource import ResourceDescription, ResourceQuery
from app.metrics import CLAIM_CONFLICTS, MATCH_DURATION, MATCH_REQUESTS, SITE_LIMIT_EXCLUSIONS
from app.settings import Settings
from app.taskqueues import store as tq_store

log = logging.getLogger("fairmatch.matching")


async def _eligible(conn: AsyncConnection, query: ResourceQuery) -> list[Candidate]:
    statement, params = eligible_task_queues(query, is_postgresql(conn))
    async with read_transaction(conn):
        rows = (await conn.execute(statement, params)).all()
    return [Candidate(r.id, r.priority_class, r.cpu_time, r.priority) for r in rows]


async def _previous_match(
    conn: AsyncConnection, requester: str, request_id: str
) -> dict[str, Any] | None:
    stmt = (
        select(jobs)
        .join(match_requests, match_requests.c.job_id == jobs.c.id)
        .where(match_requests.c.requester == requester, match_requests.c.request_id == request_id)
    )
    async with read_transaction(conn):
        row = (await conn.execute(stmt)).first()
    return None if row is None else _answer(row, row.task_queue_id)


def _answer(row: Any, tq_id: int) -> dict[str, Any]:
    answer = job_dict(row)
    answer["task_queue_id"] = tq_id
    return answer


async def match(
    conn: AsyncConnection,
    resource: ResourceDescription,
    settings: Settings,
    rng: random.Random,
    requester: str,
) -> dict[str, Any] | None:
    """Claim the job this resource should run now; None when nothing is eligible.

    `requester` (the caller's identity) is recorded on the job and scopes request ids.
    """
    started = time.perf_counter()
    result = "error"
    try:
        job, result = await _match(conn, resource, settings, rng, requester)
        return job
    finally:
        MATCH_REQUESTS.labels(result).inc()
        MATCH_DURATION.observe(time.perf_counter() - started)


async def _match(
    conn: AsyncConnection,
    resource: ResourceDescription,
    settings: Settings,
    rng: random.Random,
    requester: str,
) -> tuple[dict[str, Any] | None, str]:
    """The job (or None) and how the request ended, for the metrics."""
    query = resource.to_query()
    if resource.request_id is not None:
        previous = await _previous_match(conn, requester, resource.request_id)
        if previous is not None:
            return previous, "replayed"
    if is_postgresql(conn) and query.job_id is None:
        answered = await _match_in_one_statement(conn, resource, query, settings, requester)
        if answered is not None:
            return answered
        # the site has limits: the general path checks them
    limits = await _site_limits(conn, query.site)
    guard = None
    if limits is not None:
        query = _restricted(query, limits)
        guard = _limit_guard(limits, query.site)
    options = settings.matching
    passed_over: set[int] = set()  # TQs found empty, or refused by a limit, during this request
    for attempt in range(options.claim_attempts):
        candidates = [c for c in await _eligible(conn, query) if c.tq_id not in passed_over]
        chosen = choose(candidates, options, rng)
        if chosen is None:
            _log_decision(resource, None, None)
            return None, "no_match"
        if query.job_id is not None:
            target = ClaimTarget(chosen.tq_id, job_id=query.job_id)
        else:
            async with read_transaction(conn):
                levels = await level_weights(conn, chosen.tq_id)
            if not levels:
                passed_over.add(chosen.tq_id)
                continue
            index = draw([p for p, _ in levels], options.lottery, rng, counts=[n for _, n in levels])
            # widen the window when a crowd of matchers holds the lowest ids
            target = ClaimTarget(
                chosen.tq_id, level=levels[index][0], candidates=options.jobs_per_try << attempt
            )
        now = utcnow()
        try:
            claimed = await claim(
                conn,
                target,
                site=resource.site,
                pilot_reference=resource.pilot_reference,
                requester=requester,
                request_id=resource.request_id,
                now=now,
                lease_until=lease_until(now, settings),
                rng=rng,
                guard=guard,
            )
        except IntegrityError as exc:
            return await _replayed(conn, resource, requester, exc)
        if isinstance(claimed, Refused):
            for rule in {reason["rule"] for reason in claimed.reasons}:
                SITE_LIMIT_EXCLUSIONS.labels(rule).inc()
            query = with_banned(query, claimed.reasons)  # other TQs of that value are out too
            passed_over.add(chosen.tq_id)
            continue
        if claimed is None:
            CLAIM_CONFLICTS.inc()
            continue
        if claimed.tq_now_empty:
            await _tidy_empty_queue(conn, chosen.tq_id)
        _log_decision(resource, chosen.tq_id, claimed.job.id)
        return _answer(claimed.job, chosen.tq_id), "matched"
    return None, "no_match"


async def _match_in_one_statement(
    conn: AsyncConnection, resource: ResourceDescription, query: ResourceQuery, settings: Settings, requester: str
) -> tuple[dict[str, Any] | None, str] | None:
    """The PostgreSQL hot path; None when the site has limits."""
    options = settings.matching
    passed_over: list[int] = []  # TQs found empty during this request
    for attempt in range(options.claim_attempts):
        now = utcnow()
        try:
            outcome = await one_statement.match_once(
                conn,
                query,
                options,
                passed_over=passed_over,
                candidates=options.jobs_per_try << attempt,  # wider when a crowd holds the lowest ids
                pilot_site=resource.site,
                pilot_reference=resource.pilot_reference,
                requester=requester,
                request_id=resource.request_id,
                now=now,
                lease_until=lease_until(now, settings),
            )
        except IntegrityError as exc:
            return await _replayed(conn, resource, requester, exc)
        if outcome.site_limited:
            return None
        if outcome.tq_id is None:
            _log_decision(resource, None, None)
            return None, "no_match"
        if outcome.job is None:
            if outcome.jobs_before == 0:
                passed_over.append(outcome.tq_id)
            else:
                CLAIM_CONFLICTS.inc()
            continue
        if outcome.jobs_before <= 1:
            await _tidy_empty_queue(conn, outcome.tq_id)
        _log_decision(resource, outcome.tq_id, outcome.job.id)
        return _answer(outcome.job, outcome.tq_id), "matched"
    return None, "no_match"


async def _replayed(
    conn: AsyncConnection, resource: ResourceDescription, requester: str, exc: IntegrityError
) -> tuple[dict[str, Any] | None, str]:
    """The same request_id was claimed concurrently: answer with that job."""
    if resource.request_id is None:
        raise exc
    return await _previous_match(conn, requester, resource.request_id), "replayed"


def _limit_guard(limits: SiteLimits, site: str) -> Guard:
    """The claim's check of a job against the site's limits, in the claim's transaction."""

    async def admit(conn: AsyncConnection, job: Any) -> list[dict[str, Any]]:
        return await limit_store.admit(conn, limits, site, job, utcnow())

    return admit


async def _site_limits(conn: AsyncConnection, site: str | None) -> SiteLimits | None:
    if site is None:
        return None
    async with read_transaction(conn):
        return await limit_store.of_site(conn, site, utcnow())


def _restricted(query: ResourceQuery, limits: SiteLimits) -> ResourceQuery:
    restricted = limits.restrict(query)
    for rule in {reason["rule"] for reasons in limits.blocked().values() for reason in reasons}:
        SITE_LIMIT_EXCLUSIONS.labels(rule).inc()
    return restricted


def _log_decision(resource: ResourceDescription, tq_id: int | None, job_id: int | None) -> None:
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "match decision",
            extra={"site": resource.site, "task_queue_id": tq_id, "job_id": job_id},
        )


async def _tidy_empty_queue(conn: AsyncConnection, tq_id: int) -> None:
    """Best effort: the claim is committed and must be answered even if this fails
    (the background sweep deletes empty queues anyway)."""
    try:
        await tq_store.delete_if_empty(conn, tq_id)
    except DBAPIError as exc:
        log.warning("could not delete empty task queue %d: %s", tq_id, type(exc).__name__)


async def explain(
    conn: AsyncConnection, resource: ResourceDescription, settings: Settings
) -> list[dict[str, Any]]:
    """The eligible TQs, each with the probability that a match draws it.

    A TQ a site limit keeps out now is listed with probability 0 and the
    limits that exclude it (`excluded_by`).
    """
    query = resource.to_query()
    candidates = await _eligible(conn, query)
    if not candidates:
        return []
    async with read_transaction(conn):
        tqs = await tq_store.read_task_queues(conn, [c.tq_id for c in candidates])
        limits = await limit_store.of_site(conn, query.site, utcnow())
    for tq in tqs:
        tq["excluded_by"] = limits.reasons_for(tq) if limits is not None else []
    excluded = {tq["task_queue_id"] for tq in tqs if tq["excluded_by"]}
    odds = chances([c for c in candidates if c.tq_id not in excluded], settings.matching)
    for tq in tqs:
        tq["probability"] = odds.get(tq["task_queue_id"], 0.0)
    return sorted(tqs, key=lambda tq: (-tq["probability"], tq["task_queue_id"]))
