"""The claim port's contract (`fairmatch.matching.matcher.Claims`), the same cases against
every implementation: the PostgreSQL claim, the SQLite claim and the simulator's world.

The world has no site limits, named jobs or request ids (the simulated pilots never ask
for them): the cases of those run against the two databases only (`DATABASES`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select

from fairmatch.clock import utcnow
from fairmatch.db.batches import Batches
from fairmatch.db.claims import Claimant, ClaimDB
from fairmatch.db.engine import create_engine, read_transaction
from fairmatch.db.limits import LimitDB
from fairmatch.db.tables import tq_jobs
from fairmatch.errors import DuplicateRequest
from fairmatch.jobs.models import JobSpec
from fairmatch.limits.rules import Attribute, Limit
from fairmatch.matching.matcher import Claimed, Claims, ClaimTarget, Missed, Refused
from fairmatch.services import limits as limit_service
from fairmatch.services import submission
from fairmatch.settings import Settings
from fairmatch.simulation.world import World
from tests.conftest import BACKENDS, TestDatabase
from tests.db.conftest import clone

pytestmark = pytest.mark.anyio
SITE = "LCG.CERN.cern"
IMPLEMENTATIONS = ["postgresql", "sqlite", "world"]
DATABASES = ["postgresql", "sqlite"]
databases_only = pytest.mark.parametrize("implementation", DATABASES, indirect=True)


@dataclass
class Harness:
    """One implementation with the means to fill it and to read what it holds."""

    name: str
    settings: Settings
    engine: Any = None
    world: World | None = None
    _seconds: float = 0.0
    _connections: list[Any] = field(default_factory=list)

    @property
    def database(self) -> bool:
        return self.world is None

    async def queue(self, *user_priorities: int) -> int:
        """One job per user priority, all in one task queue; its id."""
        specs = [
            JobSpec(owner="alice", owner_group="lhcb_user", priority_class=0, user_priority=p) for p in user_priorities
        ]
        if self.world is not None:
            tq_ids = {self.world.submit(spec, 0, 1, self._seconds, 1.0)[0].tq_id for spec in specs}
        else:
            async with self.engine.connect() as conn:
                tq_ids = {
                    row["task_queue_id"] for row in await submission.submit(conn, specs, self.settings, by="alice")
                }
        [tq_id] = tq_ids
        return tq_id

    async def waiting(self, tq_id: int) -> dict[float, int]:
        """{level: jobs} the task queue holds."""
        if self.world is not None:
            return {level: n for level, n in self.world.queues[tq_id].counts.items() if n}
        async with self.engine.connect() as conn, read_transaction(conn):
            rows = await conn.execute(
                select(tq_jobs.c.real_priority, func.count())
                .where(tq_jobs.c.tq_id == tq_id)
                .group_by(tq_jobs.c.real_priority)
            )
            return {float(level): n for level, n in rows}

    async def claims(self, *, request_id: str | None = None, seed: int = 1) -> Claims:
        """The port, as one pilot's match holds it (on its own connection)."""
        if self.world is not None:
            return self.world.claims_at(self._seconds, lambda submitter: 3600.0)
        conn = await self.engine.connect()
        self._connections.append(conn)
        claimant = Claimant(
            SITE, pilot_reference=None, grid_ce=None, requester="pilot", request_id=request_id, lease_seconds=600
        )
        return ClaimDB.claiming(conn, claimant, random.Random(seed), Batches())

    async def close(self) -> None:
        for conn in self._connections:
            await conn.close()
        if self.engine is not None:
            await self.engine.dispose()


@pytest.fixture(params=IMPLEMENTATIONS)
def implementation(request, templates, tmp_path) -> Iterator[tuple[str, TestDatabase | None]]:
    """The implementation's name, and its own database (a clone of the migrated template)."""
    if request.param == "world":
        yield "world", None
        return
    if request.param not in BACKENDS:
        pytest.skip(f"{request.param} is not among FAIRMATCH_TEST_BACKENDS")
    db, remove = clone(templates[request.param], tmp_path)
    try:
        yield request.param, db
    finally:
        remove()


@pytest.fixture
async def port(implementation) -> AsyncIterator[Harness]:
    name, db = implementation
    settings = Settings(_env_file=None)
    if db is None:
        yield Harness(name, settings, world=World(settings, {}, datetime(2026, 1, 5, tzinfo=UTC)))
        return
    harness = Harness(name, settings, engine=create_engine(db.url, pool_size=16))
    try:
        yield harness
    finally:
        await harness.close()


# --- every implementation ---------------------------------------------------------------------


async def test_a_level_claim_takes_one_job_of_that_level(port):
    tq_id = await port.queue(1, 1, 2)
    outcome = await (await port.claims()).claim(ClaimTarget(tq_id, 1.0))
    assert isinstance(outcome, Claimed) and not outcome.tq_now_empty
    assert await port.waiting(tq_id) == {1.0: 1, 2.0: 1}


async def test_an_empty_level_is_missed_as_empty_while_other_levels_hold_jobs(port):
    tq_id = await port.queue(1, 2)
    claims = await port.claims()
    assert isinstance(await claims.claim(ClaimTarget(tq_id, 1.0)), Claimed)
    assert await claims.claim(ClaimTarget(tq_id, 1.0)) == Missed(level_empty=True)
    assert await claims.claim(ClaimTarget(tq_id, 5.0)) == Missed(level_empty=True)  # a level it never had
    assert await port.waiting(tq_id) == {2.0: 1}


async def test_the_task_queue_is_said_empty_exactly_at_its_last_job(port):
    tq_id = await port.queue(1, 1, 3)
    claims = await port.claims()
    emptied = []
    for level in (1.0, 3.0, 1.0):
        outcome = await claims.claim(ClaimTarget(tq_id, level))
        assert isinstance(outcome, Claimed)
        emptied.append(outcome.tq_now_empty)
    assert emptied == [False, False, True]
    assert await port.waiting(tq_id) == {}


async def test_concurrent_claims_never_take_a_job_twice(port):
    jobs = 6
    tq_id = await port.queue(*[1] * jobs)
    ports = [await port.claims(seed=k) for k in range(2 * jobs)]
    outcomes = await asyncio.gather(*(p.claim(ClaimTarget(tq_id, 1.0, candidates=3)) for p in ports))
    claimed = [o for o in outcomes if isinstance(o, Claimed)]
    assert all(isinstance(o, (Claimed, Missed)) for o in outcomes)
    # every job went to exactly one claim: the rest missed (lost a race, or found the level empty)
    assert len(claimed) <= jobs
    if port.database:
        assert len({o.job.id for o in claimed}) == len(claimed)
    left = sum((await port.waiting(tq_id)).values())
    assert left == jobs - len(claimed)
    while left:  # what the races left is still claimable, once each
        assert isinstance(await ports[0].claim(ClaimTarget(tq_id, 1.0)), Claimed)
        left -= 1
    assert await ports[0].claim(ClaimTarget(tq_id, 1.0)) == Missed(level_empty=True)


# --- the databases ----------------------------------------------------------------------------


@databases_only
async def test_a_level_claim_draws_among_the_lowest_candidate_ids(port):
    tq_id = await port.queue(*[1] * 10)
    async with port.engine.connect() as conn, read_transaction(conn):
        ids = sorted((await conn.execute(select(tq_jobs.c.job_id).where(tq_jobs.c.tq_id == tq_id))).scalars())
    taken = set()
    for seed in range(6):
        outcome = await (await port.claims(seed=seed)).claim(ClaimTarget(tq_id, 1.0, candidates=3))
        assert isinstance(outcome, Claimed)
        assert outcome.job.id in ids[: 3 + len(taken)]  # among the 3 lowest still waiting
        taken.add(outcome.job.id)


@databases_only
async def test_a_named_job_is_claimed_once_and_no_other(port):
    tq_id = await port.queue(1, 1)
    async with port.engine.connect() as conn, read_transaction(conn):
        job_id = max((await conn.execute(select(tq_jobs.c.job_id).where(tq_jobs.c.tq_id == tq_id))).scalars())
    claims = await port.claims()
    first = await claims.claim(ClaimTarget(tq_id, 1.0, job_id=job_id))
    assert isinstance(first, Claimed) and first.job.id == job_id
    assert isinstance(await claims.claim(ClaimTarget(tq_id, 1.0, job_id=job_id)), Missed)
    assert await port.waiting(tq_id) == {1.0: 1}


async def _limit_alice(port: Harness) -> Any:
    async with port.engine.connect() as conn:
        await limit_service.replace_limits(
            conn, [Limit(SITE, Attribute.owner, "alice", running_limit=0)], by="operator", asked={}
        )
        async with read_transaction(conn):
            return await LimitDB.of(conn).of_site(SITE, None, utcnow())


@databases_only
async def test_a_claim_with_limits_refuses_a_job_that_breaks_them_and_claims_nothing(port):
    tq_id = await port.queue(1)
    limits = await _limit_alice(port)
    outcome = await (await port.claims()).claim(ClaimTarget(tq_id, 1.0, limits=limits))
    assert isinstance(outcome, Refused)
    assert [(r["rule"], r["attribute"], r["value"]) for r in outcome.reasons] == [("running_limit", "owner", "alice")]
    assert await port.waiting(tq_id) == {1.0: 1}


@databases_only
async def test_a_claim_without_limits_at_a_limited_site_claims_nothing(port):
    tq_id = await port.queue(1)
    await _limit_alice(port)
    assert await (await port.claims()).claim(ClaimTarget(tq_id, 1.0)) == Missed(level_empty=False, site_limited=True)
    assert await port.waiting(tq_id) == {1.0: 1}


@databases_only
async def test_a_request_id_claims_once(port):
    tq_id = await port.queue(1, 1)
    first = await (await port.claims(request_id="pilot-1")).claim(ClaimTarget(tq_id, 1.0))
    assert isinstance(first, Claimed)
    with pytest.raises(DuplicateRequest):
        await (await port.claims(request_id="pilot-1")).claim(ClaimTarget(tq_id, 1.0))
    assert await port.waiting(tq_id) == {1.0: 1}  # the second claim was undone whole
