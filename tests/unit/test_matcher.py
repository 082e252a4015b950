"""The Matcher and its loop, with scripted claims and surroundings: no database, no I/O."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from fairmatch.matching.catalog import Catalog
from fairmatch.matching.matcher import MAX_STEPS, Claimed, ClaimTarget, Matcher, Missed, Outcome, Refused, match
from fairmatch.matching.resource import ResourceDescription, ResourceQuery
from fairmatch.matching.settings import Lottery, ResolvedMatching
from tests.unit.catalogs import catalog_of, tq_row

OPTIONS = ResolvedMatching(lottery=Lottery.exact, jobs_per_try=4, claim_attempts=3)
QUERY = ResourceDescription(site="S", cpu_time=86400).to_query(OPTIONS)


class Script:
    """Claims answered by a function of the target; every target kept."""

    def __init__(self, answer: Callable[[ClaimTarget], Outcome]) -> None:
        self.answer = answer
        self.targets: list[ClaimTarget] = []

    async def claim(self, target: ClaimTarget) -> Outcome:
        self.targets.append(target)
        return self.answer(target)


class Surroundings:
    def __init__(self, fresher: Catalog | None = None, limits: Any = None) -> None:
        self.fresher, self.limits = fresher, limits
        self.reads: list[bool] = []
        self.limit_reads = 0

    async def fresher_catalog(self, *, must: bool) -> Catalog | None:
        self.reads.append(must)
        return self.fresher if must or self.fresher is not None else None

    async def site_limits(self) -> Any:
        self.limit_reads += 1
        return self.limits


class BanOwners:
    """Site limits that ban nothing up front and exclude what a refusal names."""

    def restrict(self, query: ResourceQuery) -> ResourceQuery:
        return query

    def excluding(self, query: ResourceQuery, reasons: list[dict[str, Any]]) -> ResourceQuery:
        import dataclasses

        return dataclasses.replace(query, banned_owners=query.banned_owners | {r["value"] for r in reasons})


def run(matcher: Matcher, claims: Script, surroundings: Surroundings | None = None) -> Claimed | None:
    return asyncio.run(match(matcher, claims, surroundings or Surroundings()))


def claimed(target: ClaimTarget, empty: bool = False) -> Claimed:
    return Claimed(job={"tq_id": target.tq_id, "level": target.level}, tq_now_empty=empty)


def test_a_claim_of_the_drawn_level_is_the_answer():
    catalog = catalog_of([tq_row(1, levels=[[1.0, 3], [2.0, 1]])])
    claims = Script(claimed)
    result = run(Matcher(catalog, QUERY, OPTIONS, random.Random(1)), claims)
    assert result is not None and result.job["tq_id"] == 1
    assert len(claims.targets) == 1 and claims.targets[0].candidates == OPTIONS.jobs_per_try


def test_levels_are_drawn_by_jobs_times_real_priority():
    # level 1 holds 3 jobs (weight 3), level 2 one job (weight 2): 60:40
    catalog = catalog_of([tq_row(1, levels=[[1.0, 3], [2.0, 1]])])
    drawn = Counter()
    rng = random.Random(7)
    for _ in range(4000):
        target = Matcher(catalog, QUERY, OPTIONS, rng).next_target()
        assert target is not None
        drawn[target.level] += 1
    assert drawn[1.0] / 4000 == pytest.approx(0.6, abs=0.03)  # 4000 draws: sd ~0.008


def test_an_empty_level_is_drained_and_the_next_claim_goes_elsewhere():
    catalog = catalog_of([tq_row(1, levels=[[1.0, 1], [2.0, 1]])])
    claims = Script(lambda t: Missed(level_empty=True) if t.level == 2.0 else claimed(t))
    matcher = Matcher(catalog, QUERY, OPTIONS, random.Random(3))
    result = run(matcher, claims)
    assert result is not None and result.job["level"] == 1.0
    assert matcher.drained and [t.level for t in claims.targets].count(2.0) <= 1


def test_a_claim_that_empties_the_queue_drains_it_from_the_catalog():
    catalog = catalog_of([tq_row(1), tq_row(2)])
    claims = Script(lambda t: claimed(t, empty=True))
    first = run(Matcher(catalog, QUERY, OPTIONS, random.Random(1)), claims)
    second = run(Matcher(catalog, QUERY, OPTIONS, random.Random(1)), claims)
    assert first is not None and second is not None
    assert {first.job["tq_id"], second.job["tq_id"]} == {1, 2}
    assert run(Matcher(catalog, QUERY, OPTIONS, random.Random(1)), claims) is None


def test_lost_races_widen_the_window_and_end_after_claim_attempts():
    catalog = catalog_of([tq_row(1)])
    claims = Script(lambda t: Missed(level_empty=False))
    matcher = Matcher(catalog, QUERY, OPTIONS, random.Random(1))
    assert run(matcher, claims) is None
    assert [t.candidates for t in claims.targets] == [4, 8, 16]
    assert matcher.conflicts == OPTIONS.claim_attempts


def test_a_refused_queue_is_passed_over_with_every_queue_of_the_refused_value():
    rows = [tq_row(1, owner="alice"), tq_row(2, owner="alice"), tq_row(3, owner="bob")]
    catalog = catalog_of(rows, limited_sites=frozenset({"S"}))
    refusal = [{"rule": "running_limit", "attribute": "owner", "value": "alice"}]
    owner = {1: "alice", 2: "alice", 3: "bob"}
    claims = Script(lambda t: Refused(refusal) if owner[t.tq_id] == "alice" else claimed(t))
    surroundings = Surroundings(limits=BanOwners())
    for seed in range(20):
        claims.targets.clear()
        matcher = Matcher(catalog, QUERY, OPTIONS, random.Random(seed))
        result = run(matcher, claims, surroundings)
        assert result is not None and result.job["tq_id"] == 3
        assert len(claims.targets) <= 2  # at most one alice queue tried, never both
        assert all(t.limits is not None for t in claims.targets)
        assert matcher.refused_rules == ["running_limit"] * (len(claims.targets) - 1)


def test_limits_heard_of_only_from_a_claim_are_read_and_the_catalog_with_them():
    catalog = catalog_of([tq_row(1)])  # the catalog does not know the site has limits
    claims = Script(lambda t: claimed(t) if t.limits is not None else Missed(level_empty=False, site_limited=True))
    surroundings = Surroundings(fresher=catalog, limits=BanOwners())
    result = run(Matcher(catalog, QUERY, OPTIONS, random.Random(1)), claims, surroundings)
    assert result is not None
    assert surroundings.limit_reads == 1 and surroundings.reads == [True]
    assert [t.limits is not None for t in claims.targets] == [False, True]


def test_nothing_eligible_reads_a_fresher_catalog_once():
    empty = Catalog()
    fresher = catalog_of([tq_row(5)])
    claims = Script(claimed)
    surroundings = Surroundings(fresher=fresher)
    result = run(Matcher(empty, QUERY, OPTIONS, random.Random(1)), claims, surroundings)
    assert result is not None and result.job["tq_id"] == 5
    assert surroundings.reads == [False]
    # and once only: a second miss after the read answers None
    nothing = Surroundings(fresher=Catalog())
    assert run(Matcher(Catalog(), QUERY, OPTIONS, random.Random(1)), claims, nothing) is None
    assert nothing.reads == [False]


def test_a_catalog_proved_behind_must_be_read_anew():
    catalog = catalog_of([tq_row(1)])
    claims = Script(lambda t: Missed(level_empty=True))
    surroundings = Surroundings(fresher=Catalog())
    assert run(Matcher(catalog, QUERY, OPTIONS, random.Random(1)), claims, surroundings) is None
    assert surroundings.reads == [True]  # the drained level proved the copy behind


def test_a_named_job_is_claimed_from_its_own_queue_and_level_only():
    catalog = catalog_of([tq_row(1), tq_row(2, levels=[[3.0, 2]])])
    query = ResourceDescription(site="S", cpu_time=86400, job_id=77).to_query(OPTIONS)
    claims = Script(lambda t: Missed(level_empty=False))
    matcher = Matcher(catalog, query, OPTIONS, random.Random(1), named=(2, 3.0))
    assert run(matcher, claims) is None  # gone meanwhile: no retry elsewhere
    assert claims.targets == [ClaimTarget(2, 3.0, job_id=77)]


def test_the_loop_is_bounded():
    catalog = catalog_of([tq_row(k) for k in range(1, 200)], limited_sites=frozenset({"S"}))
    claims = Script(lambda t: Missed(level_empty=False, site_limited=True))  # limits never read
    surroundings = Surroundings(fresher=catalog, limits=None)
    assert run(Matcher(catalog, QUERY, OPTIONS, random.Random(1)), claims, surroundings) is None
    assert len(claims.targets) <= MAX_STEPS
