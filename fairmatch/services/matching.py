"""Match a resource to one job, or explain what it could match."""

from __future__ import annotations

import logging
import random
import time
from typing import Any

from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.clock import utcnow
from fairmatch.db.claims import ClaimDB, Claimed, ClaimTarget, Guard, Refused
from fairmatch.db.engine import read_transaction
from fairmatch.db.jobs import job_dict
from fairmatch.db.limits import LimitDB
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.jobs.lifecycle import lease_until
from fairmatch.limits.rules import SiteLimits, with_banned
from fairmatch.matching.catalog import Catalog, bit
from fairmatch.matching.choice import chances, choose, choose_level
from fairmatch.matching.eligibility import analysis, eligible
from fairmatch.matching.resource import ResourceDescription, ResourceQuery
from fairmatch.metrics import (
    CLAIM_CONFLICTS,
    MATCH_DURATION,
    MATCH_REQUESTS,
    SITE_LIMIT_EXCLUSIONS,
)
from fairmatch.services import taskqueues
from fairmatch.services.keeper import Keeper
from fairmatch.settings import Settings

log = logging.getLogger("fairmatch.matching")

# Steps of one match: each claims, or learns something for good (a level or TQ
# found empty, a TQ a limit refuses), so the loop ends long before this.
MAX_STEPS = 64


async def _previous_match(conn: AsyncConnection, requester: str, request_id: str) -> dict[str, Any] | None:
    async with read_transaction(conn):
        row = await ClaimDB.of(conn).previous_match(requester, request_id)
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
    keeper: Keeper,
) -> dict[str, Any] | None:
    """Claim the job this resource should run now; None when nothing is eligible.

    `requester` (the caller's identity) is recorded on the job and scopes request ids.
    """
    started = time.perf_counter()
    result = "error"
    try:
        job, result = await _match(conn, resource, settings, rng, requester, keeper)
        return job
    finally:
        MATCH_REQUESTS.labels(result).inc()
        MATCH_DURATION.observe(time.perf_counter() - started)


def _pool(catalog: Catalog, query: ResourceQuery, passed_over: set[int], named_tq: int | None) -> int:
    """The eligible TQs, less those passed over; only the named job's TQ when one is named."""
    pool = eligible(catalog, query)
    if named_tq is not None:
        entry = catalog.entries.get(named_tq)
        return pool & bit(entry.position) if entry is not None else 0
    for tq_id in passed_over:
        entry = catalog.entries.get(tq_id)
        if entry is not None:
            pool &= ~bit(entry.position)
    return pool


async def _match(
    conn: AsyncConnection,
    resource: ResourceDescription,
    settings: Settings,
    rng: random.Random,
    requester: str,
    keeper: Keeper,
) -> tuple[dict[str, Any] | None, str]:
    """The job (or None) and how the request ended, for the metrics."""
    query = resource.to_query(settings.matching)
    if resource.request_id is not None:
        previous = await _previous_match(conn, requester, resource.request_id)
        if previous is not None:
            return previous, "replayed"
    catalog = await keeper.current(conn)
    guard = None
    if query.site in catalog.limited_sites:
        query, guard = await _limited(conn, query)
    named_tq = named_level = None
    if query.job_id is not None:
        async with read_transaction(conn):
            queued = await ClaimDB.of(conn).queue_of(query.job_id)
        if queued is None:
            return None, "no_match"
        named_tq, named_level = queued
    options = settings.matching
    passed_over: set[int] = set()  # TQs a site limit refused during this request
    conflicts = 0
    refreshed = drained = False
    for _ in range(MAX_STEPS):
        entry = choose(catalog, _pool(catalog, query, passed_over, named_tq), options, rng)
        if entry is None:
            # perhaps what is eligible is too new to be known: the copy is old, or proved behind
            if not refreshed and (keeper.stale() or drained or await keeper.behind(conn)):
                await keeper.refresh(conn)
                catalog, refreshed = keeper.catalog, True
                continue
            _log_decision(resource, None, None)
            return None, "no_match"
        if named_tq is not None:
            target = ClaimTarget(entry.tq_id, level=named_level, job_id=query.job_id)
        else:
            level = choose_level(entry, options, rng)
            if level is None:
                catalog.drain(entry)
                drained = True
                continue
            # widen the window when a crowd of matchers holds the lowest ids
            target = ClaimTarget(entry.tq_id, level=level, candidates=options.jobs_per_try << min(conflicts, 10))
        now = utcnow()
        try:
            claimed = await ClaimDB.of(conn).claim(
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
            passed_over.add(entry.tq_id)
            continue
        if isinstance(claimed, Claimed):
            if claimed.tq_now_empty:
                catalog.drain(entry)
                await _tidy_empty_queue(conn, entry.tq_id)
            _log_decision(resource, entry.tq_id, claimed.job.id)
            return _answer(claimed.job, entry.tq_id), "matched"
        if claimed.site_limited and guard is None:  # limits this process has not heard of yet
            query, guard = await _limited(conn, query)
            await keeper.refresh(conn)
            catalog = keeper.catalog
            continue
        if named_tq is not None:
            return None, "no_match"  # the job asked for left the queue meanwhile
        if claimed.level_empty:
            catalog.drain(entry, target.level)
            drained = True
            continue
        CLAIM_CONFLICTS.inc()
        conflicts += 1
        if conflicts >= options.claim_attempts:
            break
    return None, "no_match"


async def _replayed(
    conn: AsyncConnection, resource: ResourceDescription, requester: str, exc: IntegrityError
) -> tuple[dict[str, Any] | None, str]:
    """The same request_id was claimed concurrently: answer with that job."""
    if resource.request_id is None:
        raise exc
    return await _previous_match(conn, requester, resource.request_id), "replayed"


async def _limited(conn: AsyncConnection, query: ResourceQuery) -> tuple[ResourceQuery, Guard | None]:
    """The query less what the site's limits ban now, and the claim's check of them."""
    limits = await _site_limits(conn, query.site)
    if limits is None:
        return query, None
    return _restricted(query, limits), _limit_guard(limits, query.site)


def _limit_guard(limits: SiteLimits, site: str) -> Guard:
    """The claim's check of a job against the site's limits, in the claim's transaction."""

    async def admit(conn: AsyncConnection, job: Any) -> list[dict[str, Any]]:
        return await LimitDB.of(conn).admit(limits, site, job, utcnow())

    return admit


async def _site_limits(conn: AsyncConnection, site: str | None) -> SiteLimits | None:
    if site is None:
        return None
    async with read_transaction(conn):
        return await LimitDB.of(conn).of_site(site, utcnow())


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
        await taskqueues.delete_if_empty(conn, tq_id)
    except DBAPIError as exc:
        log.warning("could not delete empty task queue %d: %s", tq_id, type(exc).__name__)


async def explain(
    conn: AsyncConnection, resource: ResourceDescription, settings: Settings, keeper: Keeper
) -> dict[str, Any]:
    """The eligible TQs, each with the probability that a match draws it: the very
    selection /match makes, on the latest state; and the analysis of the conditions.

    A TQ a site limit keeps out now is listed with probability 0 and the
    limits that exclude it (`excluded_by`).
    """
    query = resource.to_query(settings.matching)
    await keeper.refresh(conn, sweep=True)  # the analysis counts every queue: none deleted elsewhere
    catalog = keeper.catalog
    named_tq = None
    async with read_transaction(conn):
        limits = await LimitDB.of(conn).of_site(query.site, utcnow())
        if query.job_id is not None:
            queued = await ClaimDB.of(conn).queue_of(query.job_id)
            named_tq = queued[0] if queued is not None else None
        pool = _pool(catalog, query, set(), named_tq) if query.job_id is None or named_tq is not None else 0
        tqs = [tq for tq in await TaskQueueDB.of(conn).read(catalog.tq_ids(pool)) if tq["jobs"] > 0] if pool else []
    listed = {tq["task_queue_id"] for tq in tqs}
    for entry in catalog.entries_in(pool):
        if entry.tq_id not in listed:
            catalog.drain(entry)  # emptied since the catalog last heard of it
    if limits is not None:
        query = limits.restrict(query)
    odds = chances(catalog, _pool(catalog, query, set(), named_tq), settings.matching) if pool else {}
    for tq in tqs:
        tq["excluded_by"] = limits.reasons_for(tq) if limits is not None else []
        tq["probability"] = odds.get(tq["task_queue_id"], 0.0)
    return {
        "task_queues": sorted(tqs, key=lambda tq: (-tq["probability"], tq["task_queue_id"])),
        "analysis": analysis(catalog, query),
    }
