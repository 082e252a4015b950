"""A priority run's share corrections are stored with the run and read back as they were applied."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import insert, select, text, update

from fairmatch.clock import utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.db.loads import LoadDB, PostgresLoadDB
from fairmatch.db.priority_runs import PriorityRunDB
from fairmatch.db.tables import task_queues, tq_jobs
from fairmatch.priority.corrections import UNCORRECTED, ShareCorrections
from fairmatch.services.process import changing

pytestmark = pytest.mark.anyio

PILOT = {"Site": "S", "CPUTime": 10**6}

CORRECTED = ShareCorrections(
    enabled=True,
    groups={"lhcb_mc": 1.25, "lhcb_user": 0.8},
    owners={("lhcb_user", "alice"): 0.5, ("lhcb_user", "bob"): 1.5},
    explained={"groups": {"group": None, "entities": {"lhcb_mc": {"correction": 1.25}}}},
)


def run(report: dict) -> dict:
    now = utcnow()
    return {"runner": "test", "started_at": now, "finished_at": now, "policy": "dirac", "task_queues": 0,
            "report": report}  # fmt: skip


async def test_the_corrections_of_the_latest_run_come_back_as_they_were_applied(engine):
    async with engine.connect() as conn, conn.begin():
        db = PriorityRunDB.of(conn)
        assert await db.latest_corrections() == UNCORRECTED
        await db.record_run(run({"entities": []}), UNCORRECTED)
        _, report = await db.record_run(run({"entities": []}), CORRECTED)
        assert await db.latest_corrections() == CORRECTED
        assert await db.latest_report() == report
    # what GET /shares shows of them
    assert report["corrections_enabled"] is True and report["corrections"] == CORRECTED.explained


async def test_a_run_without_corrections_reads_back_uncorrected(engine):
    async with engine.connect() as conn, conn.begin():
        db = PriorityRunDB.of(conn)
        await db.record_run(run({"entities": []}), CORRECTED)
        _, report = await db.record_run(run({"window_days": 7}), UNCORRECTED)
        assert await db.latest_corrections() == UNCORRECTED
    assert report["corrections_enabled"] is False and report["corrections"] == {}


async def test_new_task_queues_take_the_latest_run_s_corrections(engine, world_of):
    async with engine.connect() as conn, conn.begin():
        await PriorityRunDB.of(conn).record_run(run({"entities": []}), CORRECTED)
    world = await world_of()
    await world.submit([{"owner": "alice", "owner_group": "lhcb_user"}, {"owner": "carol", "owner_group": "lhcb_prod"}])
    origins = {tq["owner"]: tq["priority_origin"] for tq in await world.task_queues()}
    assert (origins["alice"]["group_correction"], origins["alice"]["user_correction"]) == (0.8, 0.5)
    assert (origins["carol"]["group_correction"], origins["carol"]["user_correction"]) == (1.0, 1.0)


async def stored_levels(world) -> dict[float, int]:
    async with read_transaction(world.conn):
        (levels,) = (await world.conn.execute(select(task_queues.c.levels))).scalars()
    return {float(p): int(n) for p, n in levels}


@pytest.mark.parametrize("template", ["postgresql"], indirect=True)
async def test_jobs_counted_into_a_queue_while_a_run_reads_keep_their_level(world_of, monkeypatch):
    """A run reads the waiting jobs, a submission adds a level to a queue and commits, then
    the run writes: it counts that queue's levels again and writes them exactly."""
    world, other = await world_of(), await world_of()
    await world.submit([{"owner": "alice", "owner_group": "g", "user_priority": 1}] * 3)
    assert await world.match(PILOT) is not None  # claims do not subtract: the run has counts to rewrite
    (first_level,) = await stored_levels(world)
    read = PostgresLoadDB.waiting_loads

    async def then_a_submission(self, *args, **kwargs):
        rows = await read(self, *args, **kwargs)
        await other.submit([{"owner": "alice", "owner_group": "g", "user_priority": 5}])
        return rows

    monkeypatch.setattr(PostgresLoadDB, "waiting_loads", then_a_submission)
    await world.recompute()
    levels = await stored_levels(world)
    assert levels[first_level] == 2 and sorted(levels.values()) == [1, 2]  # the new level is there, exactly


@pytest.mark.parametrize("template", ["postgresql"], indirect=True)
async def test_a_drained_queue_given_a_job_while_its_levels_are_forgotten_keeps_them(world_of):
    """The forget sees a drained queue, then waits for its lock behind a transaction that
    puts a job back in it and counts it; once that commits, the queue keeps its level."""
    world, other = await world_of(), await world_of()
    await world.submit([{"owner": "alice", "owner_group": "g", "user_priority": 1}])
    job = await world.match(PILOT)
    (level,) = await stored_levels(world)  # claims do not subtract: a drained queue still lists its level
    async with other.conn.begin():
        (tq_id,) = (await other.conn.execute(select(task_queues.c.id))).scalars()
        await other.conn.execute(
            insert(tq_jobs).values(job_id=job["job_id"], tq_id=tq_id, user_priority=1, real_priority=level)
        )
        await other.conn.execute(update(task_queues).values(levels=[[level, 2]]))

        async def forget() -> int:
            async with changing(world.conn):
                return await LoadDB.of(world.conn).forget_drained_levels()

        forgetting = asyncio.create_task(forget())
        await waiting_for_a_lock(other.conn)
    assert await forgetting == 0
    assert await stored_levels(world) == {level: 2}


async def waiting_for_a_lock(conn, timeout_s: float = 10.0) -> None:
    """Return once another session of this database waits for a row lock."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    while not (await conn.execute(waiting)).scalar_one():
        assert asyncio.get_running_loop().time() < deadline, "no session waited for the lock"
        await asyncio.sleep(0.02)
