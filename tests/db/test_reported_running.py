"""Running jobs another system reports (DIRAC's JobDB, for the jobs fairmatch handed off)
count in the running-job samples the share corrections read, while the report is fresh.
Each test runs on its own clone of the migrated template, on each backend.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from fairmatch.clock import utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.db.running_samples import RunningSampleDB
from fairmatch.services import history

pytestmark = pytest.mark.anyio

EVERY, KEEP, FRESH = 60.0, 86400.0, 600.0


@pytest.fixture
async def conn(engine):
    async with engine.connect() as c:
        yield c


async def averages(conn, since, group=None) -> dict[str, float]:
    async with read_transaction(conn):
        return await RunningSampleDB.of(conn).average_running(group, since)


async def test_a_fresh_report_counts_in_the_samples_per_group_and_owner(conn):
    now = utcnow()
    running = [("lhcb_user", "alice", 30), ("lhcb_user", "bob", 10), ("lhcb_mc", "prod", 60), ("lhcb_mc", "x", 0)]
    assert await history.report_running(conn, "dirac", running, now) == 2
    assert await history.sample(conn, now, EVERY, KEEP, reported_seconds=FRESH)
    since = now - timedelta(seconds=1)
    assert await averages(conn, since) == {"lhcb_user": 40.0, "lhcb_mc": 60.0}
    assert await averages(conn, since, "lhcb_user") == {"alice": 30.0, "bob": 10.0}


async def test_a_new_report_replaces_the_last_and_a_stale_one_counts_nothing(conn):
    start = utcnow()
    await history.report_running(conn, "dirac", [("g", "a", 5), ("g", "b", 5)], start)
    await history.report_running(conn, "dirac", [("g", "a", 2)], start)
    await history.report_running(conn, "other", [("g", "a", 1)], start)
    assert await history.sample(conn, start, EVERY, KEEP, reported_seconds=FRESH)
    assert await averages(conn, start - timedelta(seconds=1), "g") == {"a": 3.0}
    later = start + timedelta(seconds=FRESH + EVERY)  # no report since: the source went silent
    assert await history.sample(conn, later, EVERY, KEEP, reported_seconds=FRESH)
    assert await averages(conn, later - timedelta(seconds=1), "g") == {}


async def test_the_latest_samples_are_the_share_drift_window(conn):
    """`latest_running(n)`: the n newest samples only, or all of them when there are fewer."""
    start = utcnow()
    for minute in range(5):
        await history.report_running(conn, "dirac", [("g", "a", minute + 1)], start + timedelta(minutes=minute))
        assert await history.sample(conn, start + timedelta(minutes=minute), EVERY, KEEP, reported_seconds=FRESH)
    async with read_transaction(conn):
        db = RunningSampleDB.of(conn)
        assert [n for _, _, n in await db.latest_running(3)] == [3, 4, 5]
        assert [n for _, _, n in await db.latest_running(30)] == [1, 2, 3, 4, 5]
