"""The match as one decision, learnt claim by claim. Pure logic.

A `Matcher` holds one request's view: the catalog, the resource's query and
what the request has learnt so far (levels and task queues found empty, task
queues a site limit refused, claims lost to other matchers). `next_target`
proposes where to claim; `learn` takes the claim's outcome.

`match` drives a matcher through two ports: `Claims` ("try to claim this
target": the PostgreSQL statement, the SQLite transaction, the simulator's
world) and `Surroundings` (a fresher catalog and the site's limits: the
service's keeper and limits tables; nothing in the simulator, whose catalog
is always current). The service and `fairmatch simulate` run this same loop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from fairmatch.matching.catalog import Catalog, Entry, bit
from fairmatch.matching.choice import choose, choose_level
from fairmatch.matching.eligibility import eligible
from fairmatch.matching.resource import ResourceQuery
from fairmatch.matching.settings import ResolvedMatching

# Claims of one match: each claims, or learns something for good (a level or a task
# queue found empty, a task queue a limit refuses), so the loop ends long before this.
MAX_STEPS = 64
# the candidate window stops widening here (jobs_per_try << 10)
MAX_WIDENING = 10


class SiteRules(Protocol):
    """A site's limits as a match uses them (`fairmatch.limits.rules.SiteLimits`)."""

    def restrict(self, query: ResourceQuery) -> ResourceQuery:
        """The query less every value banned now."""
        ...

    def excluding(self, query: ResourceQuery, reasons: list[dict[str, Any]]) -> ResourceQuery:
        """The query less the values these reasons (of a refused claim) name."""
        ...


@dataclass(frozen=True, slots=True)
class ClaimTarget:
    """Where to claim from: a user-priority level of a task queue, or one named job."""

    tq_id: int
    level: float
    job_id: int | None = None
    candidates: int = 10  # the lowest job ids of the level the claim draws among
    limits: SiteRules | None = None  # check the claimed job against these, in the claim's transaction


@dataclass(frozen=True, slots=True)
class Claimed:
    job: Any  # what the claim's implementation returns of the job (a jobs row, a simulated submitter)
    tq_now_empty: bool


@dataclass(frozen=True, slots=True)
class Missed:
    """Nothing claimed: other matchers held every candidate, the level had no job left, or
    (a claim without limits) the site turned out to have limits."""

    level_empty: bool
    site_limited: bool = False


@dataclass(frozen=True, slots=True)
class Refused:
    """The claimed job broke a site limit; the claim was undone."""

    reasons: list[dict[str, Any]]


Outcome = Claimed | Missed | Refused


class Claims(Protocol):
    """Try to claim one job of a target, atomically: all of it or nothing.

    What every implementation guarantees (tests/db/test_claim_contract.py):
    - a job is claimed at most once, however many claims run at once;
    - a level claim takes one of the level's `candidates` lowest job ids, or
      answers Missed(level_empty=True) when the level holds no job;
    - `tq_now_empty` is true exactly when the claim took the task queue's last job;
    - with `limits`, a job that breaks them is not claimed (Refused, with the reasons);
      without, a claim at a site that has limits claims nothing (Missed(site_limited=True));
    - a named target claims that job or nothing;
    - a request id already used raises `DuplicateRequest`.
    An implementation without site limits, named jobs or request ids (the simulator's
    world) is never asked for them.
    """

    async def claim(self, target: ClaimTarget) -> Outcome: ...


class Surroundings(Protocol):
    """What a match learns besides its claims."""

    async def fresher_catalog(self, *, must: bool) -> Catalog | None:
        """The catalog read anew; with `must` false, only if it may be behind (else None)."""
        ...

    async def site_limits(self) -> SiteRules | None:
        """The resource's site's limits as they stand; None when it has none."""
        ...


class Step(Enum):
    GO_ON = "go on"
    DONE = "done"
    NEEDS_LIMITS = "needs limits"  # the site has limits this request did not know of


def pool_of(catalog: Catalog, query: ResourceQuery, passed_over: set[int], named_tq: int | None) -> int:
    """The eligible task queues, less those passed over; only the named job's when one is named."""
    pool = eligible(catalog, query)
    if named_tq is not None:
        entry = catalog.entries.get(named_tq)
        return pool & bit(entry.position) if entry is not None else 0
    for tq_id in passed_over:
        entry = catalog.entries.get(tq_id)
        if entry is not None:
            pool &= ~bit(entry.position)
    return pool


@dataclass(slots=True)
class Matcher:
    """One match request's decisions. `named` is the (task queue, level) of the job the
    query names, when it names one."""

    catalog: Catalog
    query: ResourceQuery
    options: ResolvedMatching
    rng: random.Random
    named: tuple[int, float] | None = None
    limits: SiteRules | None = None
    refreshed: bool = False  # the catalog was read anew during this request
    drained: bool = False  # a claim found the catalog ahead of the database: a newer read may hold more
    conflicts: int = 0  # claims lost to other matchers
    refused_rules: list[str] = field(default_factory=list)  # the limits that refused claimed jobs
    passed_over: set[int] = field(default_factory=set)  # task queues a site limit refused
    claimed: Claimed | None = None
    _proposed: Entry | None = None

    def needs_limits(self) -> bool:
        return self.limits is None and self.query.site in self.catalog.limited_sites

    def use_limits(self, limits: SiteRules | None) -> None:
        """Match within these limits: what they ban now is out of the query, and every claim
        checks its job against them."""
        self.limits = limits
        if limits is not None:
            self.query = limits.restrict(self.query)

    def use_catalog(self, catalog: Catalog, *, refreshed: bool = True) -> None:
        self.catalog = catalog
        self.refreshed = self.refreshed or refreshed

    def next_target(self) -> ClaimTarget | None:
        """Where to claim next; None when the catalog holds nothing eligible."""
        named_tq = self.named[0] if self.named is not None else None
        while True:
            entry = choose(
                self.catalog, pool_of(self.catalog, self.query, self.passed_over, named_tq), self.options, self.rng
            )
            if entry is None:
                return None
            self._proposed = entry
            if self.named is not None:
                return ClaimTarget(entry.tq_id, self.named[1], job_id=self.query.job_id, limits=self.limits)
            level = choose_level(entry, self.options, self.rng)
            if level is None:
                self.catalog.drain(entry)
                self.drained = True
                continue
            # widen the window when a crowd of matchers holds the lowest ids
            candidates = self.options.jobs_per_try << min(self.conflicts, MAX_WIDENING)
            return ClaimTarget(entry.tq_id, level, candidates=candidates, limits=self.limits)

    def learn(self, target: ClaimTarget, outcome: Outcome) -> Step:
        """Take the outcome of the claim of `target`, the last one proposed."""
        entry = self._proposed
        assert entry is not None and entry.tq_id == target.tq_id, "learn() takes the last target proposed"
        if isinstance(outcome, Refused):
            assert target.limits is not None, "only a claim with limits is refused"
            self.refused_rules.extend(sorted({reason["rule"] for reason in outcome.reasons}))
            self.query = target.limits.excluding(self.query, outcome.reasons)  # other task queues of that value too
            self.passed_over.add(target.tq_id)
            return Step.GO_ON
        if isinstance(outcome, Claimed):
            if outcome.tq_now_empty:
                self.catalog.drain(entry)
            self.claimed = outcome
            return Step.DONE
        if outcome.site_limited and target.limits is None:
            return Step.NEEDS_LIMITS
        if self.named is not None:
            return Step.DONE  # the job asked for left the queue meanwhile
        if outcome.level_empty:
            self.catalog.drain(entry, target.level)
            self.drained = True
            return Step.GO_ON
        self.conflicts += 1
        return Step.DONE if self.conflicts >= self.options.claim_attempts else Step.GO_ON


async def match(matcher: Matcher, claims: Claims, surroundings: Surroundings) -> Claimed | None:
    """Claim the job the matcher settles on; None when nothing eligible could be claimed."""
    if matcher.needs_limits():
        matcher.use_limits(await surroundings.site_limits())
    for _ in range(MAX_STEPS):
        target = matcher.next_target()
        if target is None:
            # perhaps what is eligible is too new to be known: the copy is old, or proved behind
            fresher = None if matcher.refreshed else await surroundings.fresher_catalog(must=matcher.drained)
            if fresher is None:
                return None
            matcher.use_catalog(fresher)
            continue
        step = matcher.learn(target, await claims.claim(target))
        if step is Step.DONE:
            return matcher.claimed
        if step is Step.NEEDS_LIMITS:  # limits this process has not heard of yet
            matcher.use_limits(await surroundings.site_limits())
            catalog = await surroundings.fresher_catalog(must=True)
            if catalog is not None:
                matcher.use_catalog(catalog, refreshed=False)
    return None
