"""Match a resource to one job, or explain what it could match."""

from __future__ import annotations

import functools
import json
import logging
import random
import time
from typing import Any

from prometheus_client import Counter
from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.clock import utcnow
from fairmatch.db.claims import Claimant, ClaimDB
from fairmatch.db.engine import read_transaction
from fairmatch.db.jobs import job_of
from fairmatch.db.limits import LimitDB
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.errors import Conflict, DuplicateRequest
from fairmatch.jobs.views import Job
from fairmatch.limits.rules import SiteLimits
from fairmatch.matching.catalog import Catalog
from fairmatch.matching.choice import chances
from fairmatch.matching.eligibility import analysis, eligible
from fairmatch.matching.matcher import Matcher, pool_of
from fairmatch.matching.matcher import match as run_matcher
from fairmatch.matching.resource import ClaimingResource, ResourceDescription, fields_differing
from fairmatch.matching.site_mask import with_site_mask
from fairmatch.metrics import (
    CLAIM_BATCH_SIZE,
    CLAIM_CONFLICTS,
    MATCH_DURATION,
    MATCH_REQUESTS,
    SITE_LIMIT_EXCLUSIONS,
)
from fairmatch.services.keeper import Keeper
from fairmatch.services.process import Process
from fairmatch.settings import Settings

log = logging.getLogger("fairmatch.matching")


async def _previous_match(conn: AsyncConnection, requester: str, resource: ClaimingResource) -> Job | None:
    """The job this requester's request id already claimed, if any. A replay must be the same
    request: one whose matching fields differ from the first's is refused (409), naming the
    first's site and those fields, rather than answered with a job matched for other terms."""
    assert resource.request_id is not None
    async with read_transaction(conn):
        row = await ClaimDB.of(conn).previous_match(requester, resource.request_id)
    if row is None:
        return None
    if row.asked is not None:
        differing = fields_differing(row.asked, resource.matching_fields())
        if differing:
            raise Conflict(
                f"request_id {resource.request_id!r} was first sent from site {row.asked['site']!r} with other"
                f" matching fields ({', '.join(differing)}): a replay must repeat the first request",
                request_id=resource.request_id,
                first_site=row.asked["site"],
                differing_fields=differing,
            )
    return job_of(row, matched_from=row.task_queue_id)


def _pilot_ce(resource: ResourceDescription) -> str | None:
    """The CE a pilot runs behind: the one GridCE it names (none when it names several)."""
    ces = [resource.grid_ce] if isinstance(resource.grid_ce, str) else list(resource.grid_ce or ())
    return ces[0] if len(ces) == 1 else None


async def match(
    conn: AsyncConnection,
    resource: ClaimingResource,
    settings: Settings,
    rng: random.Random,
    requester: str,
    process: Process,
) -> Job | None:
    """Claim the job this resource should run now; None when nothing is eligible.

    `requester` (the caller's identity) is recorded on the job and scopes request ids;
    `process` holds the catalog the match draws from and what it leaves behind.
    """
    started = time.perf_counter()
    result = "error"
    try:
        job, result = await _match(conn, resource, settings, rng, requester, process)
        if result == "no_match" and resource.pilot_reference is not None and resource.site is not None:
            _count_empty(process, resource, requester)
        return job
    finally:
        _match_requests(result).inc()
        MATCH_DURATION.observe(time.perf_counter() - started)


def _count_empty(process: Process, resource: ClaimingResource, requester: str) -> None:
    """A 204 for a pilot on record: counted in this process, written by the background loop."""
    assert resource.pilot_reference is not None and resource.site is not None
    process.empty_matches.count(
        resource.pilot_reference,
        requester=requester,
        site=resource.site,
        grid_ce=_pilot_ce(resource),
        benchmark=resource.pilot_benchmark,
        at=utcnow(),
    )


@functools.cache
def _match_requests(result: str) -> Counter:
    """The series of one result, looked up once: `labels()` checks and locks on every call."""
    return MATCH_REQUESTS.labels(result)


class _Surroundings:
    """The match's port to this process's catalog and the limits its pilot is held to."""

    def __init__(self, conn: AsyncConnection, keeper: Keeper, site: str | None, grid_ce: str | None) -> None:
        self.conn, self.keeper, self.site, self.grid_ce = conn, keeper, site, grid_ce

    async def fresher_catalog(self, *, must: bool) -> Catalog | None:
        if not (must or self.keeper.stale() or await self.keeper.behind(self.conn)):
            return None
        await self.keeper.refresh(self.conn)
        return self.keeper.catalog

    async def site_limits(self) -> SiteLimits | None:
        limits = await _site_limits(self.conn, self.site, self.grid_ce)
        if limits is not None:
            for rule in {reason["rule"] for reasons in limits.blocked().values() for reason in reasons}:
                SITE_LIMIT_EXCLUSIONS.labels(rule).inc()
        return limits


async def _match(
    conn: AsyncConnection,
    resource: ClaimingResource,
    settings: Settings,
    rng: random.Random,
    requester: str,
    process: Process,
) -> tuple[Job | None, str]:
    """The job (or None) and how the request ended, for the metrics."""
    keeper = process.keeper
    options = settings.effective_matching
    query = resource.to_query(options)
    if resource.request_id is not None:
        previous = await _previous_match(conn, requester, resource)
        if previous is not None:
            return previous, "replayed"
    named = None
    if query.job_id is not None:
        async with read_transaction(conn):
            named = await ClaimDB.of(conn).queue_of(query.job_id)
        if named is None:
            return None, "no_match"
    catalog = await keeper.current(conn)
    query = with_site_mask(query, catalog.masked_sites, options.masked_site_job_types)
    matcher = Matcher(catalog, query, options, rng, named=named)
    claimant = Claimant(
        site=resource.site,
        pilot_reference=resource.pilot_reference,
        grid_ce=_pilot_ce(resource),
        requester=requester,
        request_id=resource.request_id,
        lease_seconds=settings.jobs.matched_lease_seconds,
        benchmark=resource.pilot_benchmark,
        request_resource=None if resource.request_id is None else json.dumps(resource.matching_fields()),
        handoff=resource.handoff,
    )
    try:
        claimed = await run_matcher(
            matcher,
            ClaimDB.claiming(conn, claimant, rng, process.batches, on_batch=CLAIM_BATCH_SIZE.observe),
            _Surroundings(conn, keeper, query.site, claimant.grid_ce),
        )
    except DuplicateRequest:  # the same request id, claimed concurrently: answer with that job
        if resource.request_id is None:
            raise
        return await _previous_match(conn, requester, resource), "replayed"
    finally:
        if matcher.conflicts:  # most matches lose no race: no write to the shared metrics file
            CLAIM_CONFLICTS.inc(matcher.conflicts)
        for rule in matcher.refused_rules:
            SITE_LIMIT_EXCLUSIONS.labels(rule).inc()
    if claimed is None:
        _log_decision(resource, None, None)
        return None, "no_match"
    tq_id = claimed.job.task_queue_id
    if claimed.tq_now_empty:  # its group's share goes to its other queues within a second
        process.drained_groups.note(claimed.job.owner_group)
    _log_decision(resource, tq_id, claimed.job.id)
    return job_of(claimed.job, matched_from=tq_id), "matched"


async def _site_limits(conn: AsyncConnection, site: str | None, grid_ce: str | None) -> SiteLimits | None:
    if site is None:
        return None
    async with read_transaction(conn):
        return await LimitDB.of(conn).of_site(site, grid_ce, utcnow())


def _log_decision(resource: ClaimingResource, tq_id: int | None, job_id: int | None) -> None:
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "match decision",
            extra={"site": resource.site, "task_queue_id": tq_id, "job_id": job_id},
        )


async def explain(
    conn: AsyncConnection,
    resource: ResourceDescription,
    settings: Settings,
    keeper: Keeper,
    *,
    include_empty: bool = False,
) -> dict[str, Any]:
    """The eligible TQs, each with the probability that a match draws it: the very
    selection /match makes, on the latest state; and the analysis of the conditions.

    A TQ a site limit keeps out now (the whole site's, or that of the CE the
    resource names) is listed with probability 0 and the limits that exclude it
    (`excluded_by`). With `include_empty`, the eligible TQs without waiting jobs are
    listed too, with probability 0.
    """
    options = settings.effective_matching
    query = resource.to_query(options)
    await keeper.refresh(conn, sweep=True)  # the analysis counts every queue: none deleted elsewhere
    catalog = keeper.catalog
    query = with_site_mask(query, catalog.masked_sites, options.masked_site_job_types)
    named_tq = None
    async with read_transaction(conn):
        limits = await LimitDB.of(conn).of_site(query.site, _pilot_ce(resource), utcnow())
        if query.job_id is not None:
            queued = await ClaimDB.of(conn).queue_of(query.job_id)
            named_tq = queued[0] if queued is not None else None
        pool = pool_of(catalog, query, set(), named_tq) if query.job_id is None or named_tq is not None else 0
        tqs = await TaskQueueDB.of(conn).read(catalog.tq_ids(pool)) if pool else []
        listed = {tq.task_queue_id for tq in tqs if tq.jobs > 0}
        if include_empty and query.job_id is None:
            idle = eligible(catalog, query, among=catalog.every) & ~pool
            tqs += await TaskQueueDB.of(conn).read(catalog.tq_ids(idle)) if idle else []
        else:
            tqs = [tq for tq in tqs if tq.task_queue_id in listed]
    for entry in catalog.entries_in(pool):
        if entry.tq_id not in listed:
            catalog.drain(entry)  # emptied since the catalog last heard of it
    if limits is not None:
        query = limits.restrict(query)
    odds = chances(catalog, pool_of(catalog, query, set(), named_tq), options) if pool else {}
    shown = []
    for tq in tqs:
        fields = dict(tq)
        fields["excluded_by"] = limits.reasons_for(fields) if limits is not None else []
        fields["probability"] = odds.get(tq.task_queue_id, 0.0)
        shown.append(fields)
    return {
        "task_queues": sorted(shown, key=lambda tq: (-tq["probability"], tq["task_queue_id"])),
        "analysis": analysis(catalog, query),
    }
