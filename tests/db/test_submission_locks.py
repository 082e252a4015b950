"""A submission and a priority run touching the same task queues never deadlock.

A run updates TQs in id order; a submission holds the TQs it joins against
deletion with share locks, which it must take in the same order. Under load
(two POST /jobs and the priority refresh at once) locks taken in hash order
made PostgreSQL abort one side as a deadlock, and the submission failed.
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select, text

from fairmatch.db.tables import task_queues
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.jobs.models import JobSpec
from fairmatch.services import submission

pytestmark = pytest.mark.anyio


def spec(owner: str) -> JobSpec:
    return JobSpec(priority_class=0, owner=owner, owner_group="g")


async def test_a_submission_locks_its_task_queues_in_the_order_priority_runs_update_them(engine, settings, cloned):
    if cloned.backend != "postgresql":
        pytest.skip("SQLite has one writer at a time")
    async with engine.connect() as conn:
        for i in range(40):  # one at a time: a submission creates its new TQs in hash order
            await submission.submit(conn, [spec(f"u{i}")], settings, by="alice")
        async with conn.begin():
            rows = (await conn.execute(select(task_queues.c.id, task_queues.c.requirements_hash, task_queues.c.owner)
                                       .order_by(task_queues.c.id))).all()  # fmt: skip
    assert len(rows) == 40, rows
    # two TQs whose hashes sort the other way round from their ids
    low, high = next((a, b) for a in rows for b in rows if a.id < b.id and a.requirements_hash > b.requirements_hash)
    async with engine.connect() as run, engine.connect() as submitter:
        async with submitter.begin():  # the plans of a large TQ table: the hash index, read in hash order
            await submitter.execute(text("SET enable_seqscan = off"))
            await submitter.execute(text("SET enable_bitmapscan = off"))
        holds = await submitter.begin()
        async with run.begin():
            await run.execute(text("SET LOCAL deadlock_timeout = '100ms'"))
            await run.execute(text("UPDATE task_queues SET priority = 2 WHERE id = :id"), {"id": low.id})
            # the submission's step that holds the TQs it joins (its inserts came first and found them)
            holding = asyncio.create_task(
                TaskQueueDB.of(submitter)._lock_existing([high.requirements_hash, low.requirements_hash])
            )
            await asyncio.sleep(0.5)
            assert not holding.done()  # waits for the run's first row, holding nothing the run needs next
            await asyncio.wait_for(
                run.execute(text("UPDATE task_queues SET priority = 2 WHERE id = :id"), {"id": high.id}), timeout=5
            )
        held = await asyncio.wait_for(holding, timeout=5)
        await holds.commit()
    assert held == {high.requirements_hash: high.id, low.requirements_hash: low.id}
