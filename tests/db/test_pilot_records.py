"""A pilot's record follows one rule whoever writes it, a claim or the flush of empty matches,
on both backends: counts add up, the latest time seen never goes back, a benchmark and the
current job stay until a newer one comes."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from fairmatch.clock import as_utc, utcnow
from fairmatch.db.batches import Batches
from fairmatch.db.claims import Claimant, ClaimDB
from fairmatch.db.pilots import EmptyMatches, PilotDB
from fairmatch.db.tables import pilots
from fairmatch.jobs.models import JobSpec
from fairmatch.matching.matcher import Claimed, ClaimTarget
from fairmatch.services import submission

pytestmark = pytest.mark.anyio
SITE = "LCG.CERN.cern"
PILOT = "https://ce.example/pilot-1"


async def _claim(engine: Any, job_id: int, benchmark: float | None) -> Claimed:
    async with engine.connect() as conn:
        queue = await ClaimDB.of(conn).queue_of(job_id)
        await conn.rollback()
        assert queue is not None
        claimant = Claimant(SITE, PILOT, grid_ce="ce.example", requester="pilot", request_id=None,
                            lease_seconds=600, benchmark=benchmark)  # fmt: skip
        claims = ClaimDB.claiming(conn, claimant, random.Random(1), Batches())
        outcome = await claims.claim(ClaimTarget(queue[0], queue[1], job_id=job_id))
        assert isinstance(outcome, Claimed)
        return outcome


async def _flush(engine: Any, at: Any, count: int) -> None:
    async with engine.begin() as conn:
        await PilotDB.of(conn).add_empty_matches(
            [EmptyMatches(PILOT, "pilot", SITE, None, None, first_at=at, last_at=at, count=count)]
        )


async def _record(engine: Any) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(select(pilots).where(pilots.c.reference == PILOT))).one()


async def test_claims_and_flushes_write_one_record(engine, settings):
    specs = [JobSpec(owner="alice", owner_group="lhcb_user", priority_class=0) for _ in range(2)]
    async with engine.connect() as conn:
        first, second = (row["job_id"] for row in await submission.submit(conn, specs, settings, by="alice"))

    claimed = await _claim(engine, first, benchmark=12.5)
    record = await _record(engine)
    seen = as_utc(record.last_seen)
    assert (record.matches, record.empty_matches, record.current_job_id) == (1, 0, first)
    assert (record.benchmark, record.grid_ce, as_utc(claimed.job.matched_at)) == (12.5, "ce.example", seen)

    await _flush(engine, seen - timedelta(seconds=5), count=2)  # 204s counted before the claim
    record = await _record(engine)
    assert (record.matches, record.empty_matches, record.current_job_id) == (1, 2, first)
    assert (record.benchmark, record.grid_ce, as_utc(record.last_seen)) == (12.5, None, seen)

    later = utcnow() + timedelta(minutes=5)
    await _flush(engine, later, count=1)
    await _claim(engine, second, benchmark=None)  # its time is before the 204 just written
    record = await _record(engine)
    assert (record.matches, record.empty_matches, record.current_job_id) == (2, 3, second)
    assert (record.benchmark, record.grid_ce, as_utc(record.last_seen)) == (12.5, "ce.example", later)
