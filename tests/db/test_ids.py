"""No id is given twice, on both backends: the rows the service deletes leave their ids unused.

Nothing deletes jobs or job events (a killed or finished job stays, with its events),
and the sampler and the priority loop always keep their newest row, so the ids that
could come back are those of the task queues deleted when they empty and of the
usage charges pruned once older than every window.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from sqlalchemy import select

from fairmatch.clock import utcnow
from fairmatch.db.batches import Batches
from fairmatch.db.claims import Claimant, ClaimDB
from fairmatch.db.engine import read_transaction
from fairmatch.db.tables import usage_charges
from fairmatch.jobs.models import StatusUpdate
from fairmatch.matching.matcher import Claimed, ClaimTarget
from fairmatch.services import accounting, jobs, taskqueues
from tests.db.world import World

pytestmark = pytest.mark.anyio
PILOT = {"Site": "LCG.CERN.cern", "CPUTime": 10**6}


async def only_queue_id(world: World) -> int:
    [queue] = await world.task_queues()
    return queue["task_queue_id"]


async def test_a_queue_the_sweep_deletes_never_lends_its_id_to_the_next_new_queue(engine, settings):
    async with engine.connect() as conn:
        world = World(conn, settings, seed=1)
        await world.submit([{"owner": "alice", "owner_group": "g"}])
        emptied = await only_queue_id(world)
        # a bare claim leaves the emptied queue in place, for the sweep to find
        claimant = Claimant(
            PILOT["Site"], pilot_reference=None, grid_ce=None, requester="pilot", request_id=None, lease_seconds=600
        )
        claimed = await ClaimDB.claiming(conn, claimant, random.Random(1), Batches()).claim(
            ClaimTarget(emptied, level=1.0)
        )
        assert isinstance(claimed, Claimed)
        assert await taskqueues.delete_all_empty(conn) == 1
        assert await world.task_queues() == []
        await world.submit([{"owner": "bob", "owner_group": "h"}])
        assert await only_queue_id(world) > emptied


async def test_a_queue_a_kill_empties_never_lends_its_id_to_the_next_new_queue(engine, settings):
    async with engine.connect() as conn:
        world = World(conn, settings, seed=1)
        [job_id] = await world.submit([{"owner": "alice", "owner_group": "g"}])
        emptied = await only_queue_id(world)
        await jobs.kill(conn, job_id, by="alice")  # deletes the queue it leaves empty
        assert await world.task_queues() == []
        await world.submit([{"owner": "bob", "owner_group": "h"}])
        assert await only_queue_id(world) > emptied


async def test_a_pruned_usage_charge_never_lends_its_id_to_the_next_charge(engine, settings):
    async def finish_one(world: World, owner: str) -> list[int]:
        [job_id] = await world.submit([{"owner": owner, "owner_group": "g"}])
        assert (await world.match(PILOT))["job_id"] == job_id
        await world.set_status(job_id, "Running")
        await jobs.report_status(conn, job_id, StatusUpdate(status="Done", cpu_seconds=60), settings, by="pilot")
        async with read_transaction(conn):
            return list((await conn.execute(select(usage_charges.c.id))).scalars())

    async with engine.connect() as conn:
        world = World(conn, settings, seed=1)
        [first] = await finish_one(world, "alice")
        assert await accounting.fold_charges(conn, settings, wait=True) == 1  # only folded charges are pruned
        assert await accounting.prune_charges(conn, utcnow() + timedelta(days=1)) == 1
        [second] = await finish_one(world, "bob")
        assert second > first
