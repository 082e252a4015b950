"""The change signal is raised after the commit of a change and never after a rollback;
this process's keeper catches up on it at once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from fairmatch.db.change_signal import ChangeSignal
from fairmatch.db.groups import GroupDB
from fairmatch.db.loads import LoadDB
from fairmatch.db.tables import task_queues
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.limits.rules import Attribute, Limit
from fairmatch.priority.groups import JOB_SHARING, GroupUpdate, stored_values
from fairmatch.services import groups, limits
from fairmatch.services.process import Process
from tests.db.world import World

pytestmark = pytest.mark.anyio


class Refused(Exception):
    pass


def sharing_group() -> dict:
    return stored_values(1000, [JOB_SHARING], False, 0)


async def test_a_change_signals_once_its_transaction_has_committed(engine):
    changes = ChangeSignal()
    async with engine.connect() as conn:
        async with changes.changing(conn):
            await GroupDB.of(conn).put_group("prod", sharing_group())
            assert changes.generation == 0  # not yet: a matcher would read the old row
        assert changes.generation == 1


async def test_a_rolled_back_change_does_not_signal(engine, settings):
    async with engine.connect() as conn:
        keeper = Process(engine, matching=settings.matching).keeper
        await keeper.refresh(conn)
        with pytest.raises(Refused):
            async with keeper.changes.changing(conn):
                await GroupDB.of(conn).put_group("prod", sharing_group())
                raise Refused
        assert keeper.changes.generation == 0
        assert await GroupDB.of(conn).group("prod") is None
        assert (await keeper.current(conn)).sharing_groups == frozenset()


async def test_a_transaction_that_changes_nothing_does_not_signal(engine):
    changes = ChangeSignal()
    async with engine.connect() as conn:
        async with changes.changing(conn):
            assert await LoadDB.of(conn).forget_drained_levels() == 0
        assert changes.generation == 0


async def test_a_change_outside_a_changing_transaction_is_refused(engine):
    """So that no caller can write a change and forget the signal."""
    async with engine.connect() as conn:
        with pytest.raises(RuntimeError, match="changing"):
            async with conn.begin():
                await GroupDB.of(conn).put_group("prod", sharing_group())
        assert await GroupDB.of(conn).group("prod") is None


async def test_the_keeper_sees_this_process_s_changes_before_its_next_match(engine, settings):
    async with engine.connect() as conn:
        keeper = Process(engine, matching=settings.matching.model_copy(update={"refresh_seconds": 3600})).keeper
        await keeper.refresh(conn)
        assert keeper.catalog.sharing_groups == frozenset() and keeper.catalog.limited_sites == frozenset()
        await groups.put_group(conn, "prod", GroupUpdate(job_share=1000, properties=[JOB_SHARING]))
        assert (await keeper.current(conn)).sharing_groups == frozenset({"prod"})
        limit = Limit(site="LCG.A.xx", attribute=Attribute.owner_group, value="prod", running_limit=1)
        await limits.replace_limits(conn, [limit], by="admin", asked={})
        assert "LCG.A.xx" in (await keeper.current(conn)).limited_sites


async def test_a_queue_committed_past_the_poll_margin_is_read_once_the_keeper_finds_it_behind(engine, settings):
    """A writer that stamped its queue's change, then stalled past the next poll's look-back
    before committing: `behind` finds a change later than the latest the copy holds, and the
    refresh that follows reads back to it, so that the queue's jobs are matchable at once."""
    async with engine.connect() as conn:
        world = World(conn, settings, seed=1)
        matching = settings.matching.model_copy(update={"refresh_seconds": 3600, "refresh_margin_seconds": 1})
        keeper = Process(engine, matching=matching).keeper
        await world.submit([{"owner": "alice", "owner_group": "g"}])
        now = await TaskQueueDB.of(conn).database_now()
        await _stamp(conn, "alice", now - timedelta(seconds=20))
        await keeper.refresh(conn)
        assert {e.owner for e in keeper.catalog.entries.values()} == {"alice"}

        await world.submit([{"owner": "bob", "owner_group": "g"}])
        await _stamp(conn, "bob", now - timedelta(seconds=10))  # before the last read, less its margin
        assert await keeper.behind(conn)
        await keeper.refresh(conn)
        assert {e.owner for e in keeper.catalog.entries.values()} == {"alice", "bob"}
        assert not await keeper.behind(conn)


async def _stamp(conn, owner: str, at) -> None:
    await conn.execute(update(task_queues).where(task_queues.c.owner == owner).values(changed_at=at))
    await conn.commit()
