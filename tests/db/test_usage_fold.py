"""Charges on a job's path, folds off it: exactly once, never waiting on a shared row.

A finished job's report appends its charge; the priority loop folds the log
into the totals. Each test runs on its own clone of the migrated template,
on each backend; the concurrent cases need PostgreSQL's row locks.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import select, text

from fairmatch.clock import utcnow
from fairmatch.db.accounting import AccountingDB
from fairmatch.db.engine import read_transaction
from fairmatch.db.tables import usage_charges
from fairmatch.jobs.models import StatusUpdate
from fairmatch.services import accounting, jobs
from tests.db.world import World

pytestmark = pytest.mark.anyio

PILOT = {"Site": "S", "CPUTime": 10**6}


def finished(job_id: int, cpu: float = 100.0, owner: str = "alice", group: str = "theory") -> dict:
    return {"id": job_id, "owner": owner, "owner_group": group, "vo": "hep", "cpu_seconds": cpu, "status": "Done"}


async def log(conn, *rows: dict) -> None:
    """Charges of finished jobs, committed (as their reports commit them)."""
    async with conn.begin():
        for row in rows:
            await accounting.charge(conn, row, utcnow(), conn.info["settings"])


async def usage_of(conn, node=("theory", "alice")) -> float:
    async with read_transaction(conn):
        return (await accounting.read_usage(conn, utcnow(), conn.info["settings"])).get(node, 0.0)


async def pending(conn) -> int:
    async with read_transaction(conn):
        stmt = select(usage_charges.c.id).where(usage_charges.c.folded_at.is_(None))
        return len((await conn.execute(stmt)).all())


@pytest.fixture
async def conn(engine, settings):
    async with engine.connect() as c:
        c.info["settings"] = settings
        yield c


async def test_a_charge_counts_once_folded_and_only_once(conn, settings):
    await log(conn, finished(1), finished(2, cpu=50.0))
    assert await usage_of(conn) == 0.0 and await pending(conn) == 2  # logged, not yet folded
    assert await accounting.fold_charges(conn, settings, wait=True) == 2
    assert await usage_of(conn) == pytest.approx(150.0)
    assert await accounting.fold_charges(conn, settings, wait=True) == 0  # a second fold adds nothing
    assert await usage_of(conn) == pytest.approx(150.0) and await pending(conn) == 0


async def test_a_fold_that_fails_before_its_commit_leaves_every_charge_for_the_next(conn, settings, monkeypatch):
    """A crash between marking charges folded and writing the totals rolls both back."""
    await log(conn, finished(1))

    async def crash(self, totals):
        raise RuntimeError("the process dies here")

    with monkeypatch.context() as patched:
        patched.setattr(AccountingDB, "write_totals", crash)
        with pytest.raises(RuntimeError):
            await accounting.fold_charges(conn, settings, wait=True)
    assert await pending(conn) == 1 and await usage_of(conn) == 0.0
    assert await accounting.fold_charges(conn, settings, wait=True) == 1
    assert await usage_of(conn) == pytest.approx(100.0)


async def test_a_report_that_is_refused_or_retried_charges_once(engine, settings):
    async with engine.connect() as c:
        world = World(c, settings, seed=1)
        (job_id,) = await world.submit([{"owner": "alice", "owner_group": "theory"}])
        assert (await world.match(PILOT))["job_id"] == job_id
        await world.set_status(job_id, "Running")
        done = StatusUpdate(status="Done", cpu_seconds=70.0)
        await jobs.report_status(c, job_id, done, settings, by="pilot")
        with pytest.raises(Exception, match="cannot become Done"):
            await jobs.report_status(c, job_id, done, settings, by="pilot")  # the pilot's retry
        c.info["settings"] = settings
        assert await accounting.fold_charges(c, settings, wait=True) == 1
        assert await usage_of(c) == pytest.approx(70.0)


@pytest.fixture
async def pg_conns(engine, settings, cloned):
    if cloned.backend != "postgresql":
        pytest.skip("row locks and concurrent transactions: PostgreSQL")
    async with engine.connect() as a, engine.connect() as b:
        for c in (a, b):
            c.info["settings"] = settings
        yield a, b


async def test_a_charge_committed_during_a_fold_is_folded_by_the_next(pg_conns, settings):
    """The fold takes what is committed; a report still open when it runs is not lost."""
    reporter, folder = pg_conns
    await log(folder, finished(1))
    async with reporter.begin():
        await accounting.charge(reporter, finished(2, cpu=30.0), utcnow(), settings)
        assert await accounting.fold_charges(folder, settings, wait=True) == 1  # job 2 not committed yet
    assert await usage_of(folder) == pytest.approx(100.0)
    assert await accounting.fold_charges(folder, settings, wait=True) == 1
    assert await usage_of(folder) == pytest.approx(130.0)


async def test_two_folds_at_once_count_each_charge_once(pg_conns, settings):
    a, b = pg_conns
    await log(a, *(finished(i, cpu=1.0) for i in range(50)))
    folded = await asyncio.gather(
        accounting.fold_charges(a, settings, wait=True), accounting.fold_charges(b, settings, wait=True)
    )
    assert sorted(folded) == [0, 50]
    assert await usage_of(a) == pytest.approx(50.0)
    assert await usage_of(a, ("theory", "")) == pytest.approx(50.0)


async def test_a_scheduled_fold_gives_way_to_one_in_progress(pg_conns, settings):
    a, b = pg_conns
    await log(a, finished(1))
    async with a.begin():
        assert await AccountingDB.of(a).lock_totals(wait=True)
        assert await accounting.fold_charges(b, settings, wait=False) is None
    assert await accounting.fold_charges(b, settings, wait=False) == 1


async def test_a_report_never_waits_on_a_fold_or_on_another_report(engine, settings, pg_conns):
    """Done reports while another report's transaction is open and a fold holds every
    totals row locked: each finishes at once, with its charge logged."""
    holder, _ = pg_conns
    async with engine.connect() as c:
        world = World(c, settings, seed=1)
        ids = await world.submit([{"owner": "alice", "owner_group": "theory"} for _ in range(3)])
        for _ in ids:
            await world.match(PILOT)
        for job_id in ids:
            await world.set_status(job_id, "Running")
        await jobs.report_status(c, ids[0], StatusUpdate(status="Done", cpu_seconds=1.0), settings, by="pilot")
        assert await accounting.fold_charges(c, settings, wait=True) == 1  # usage_totals rows exist
    async with holder.begin():
        await AccountingDB.of(holder).lock_totals(wait=True)
        await holder.execute(text("SELECT * FROM usage_totals FOR UPDATE"))
        await accounting.charge(holder, finished(99), utcnow(), settings)  # another report, not committed
        async with engine.connect() as c:
            for job_id in ids[1:]:
                report = StatusUpdate(status="Done", cpu_seconds=2.0)
                answer = await asyncio.wait_for(jobs.report_status(c, job_id, report, settings, by="pilot"), timeout=5)
                assert answer.status == "Done"
    assert await pending(holder) == 3


async def test_pruning_the_log_keeps_what_is_not_folded_yet(conn, settings):
    await log(conn, finished(1))
    later = utcnow() + timedelta(days=1)
    assert await accounting.prune_charges(conn, later) == 0
    assert await accounting.fold_charges(conn, settings, wait=True) == 1
    assert await accounting.prune_charges(conn, later) == 1
    assert await usage_of(conn) == pytest.approx(100.0)  # the totals keep it
