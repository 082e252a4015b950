"""A task queue left without jobs stays for `taskqueues.keep_empty_seconds` after its row
last changed, to be refilled; the sweep deletes it after that, on both backends."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from fairmatch.db.tables import task_queues
from fairmatch.services import taskqueues
from tests.db.world import World

pytestmark = pytest.mark.anyio
PILOT = {"Site": "LCG.CERN.cern", "CPUTime": 10**6}
KEEP = timedelta(seconds=60)


async def test_an_emptied_queue_is_kept_until_unchanged_for_the_keep_time(engine, settings):
    async with engine.connect() as conn:
        world = World(conn, settings, seed=1)
        await world.submit([{"owner": "alice", "owner_group": "g"}, {"owner": "bob", "owner_group": "g"}])
        assert (await world.match(PILOT)) is not None
        [emptied] = [tq["task_queue_id"] for tq in await world.task_queues() if tq["jobs"] == 0]

        assert await taskqueues.delete_all_empty(conn, KEEP) == 0  # just emptied: kept
        async with conn.begin():  # its row last changed two minutes ago
            await conn.execute(
                update(task_queues)
                .where(task_queues.c.id == emptied)
                .values(changed_at=task_queues.c.changed_at - timedelta(minutes=2))
            )
        assert await taskqueues.delete_all_empty(conn, KEEP) == 1
        left = await world.task_queues()
        assert [tq["jobs"] for tq in left] == [1]  # the queue that still holds a job stays
        assert emptied not in {tq["task_queue_id"] for tq in left}
