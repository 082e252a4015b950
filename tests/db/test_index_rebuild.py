"""Index upkeep after a purge: bloated indexes rebuilt, leftovers of a cut rebuild dropped.

The bloat is the one the soak measured: entries ordered by job id of which a few
live on among many deleted, so that every page stays while nearly all of it is
empty. It is made here by loading jobs and deleting all but every 50th.
"""

from __future__ import annotations

import logging
import math

import psycopg
import pytest

from fairmatch.clock import utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.db.indexes import IndexDB, IndexSize
from fairmatch.matching.settings import MatchingSettings
from fairmatch.metrics import INDEXES_REBUILT
from fairmatch.services import retention
from fairmatch.services.status import summary

pytestmark = pytest.mark.anyio

JOB_INDEXES = {"pk_jobs", "ix_jobs_status_id", "ix_jobs_owner_id", "ix_jobs_owner_group_id"}
LOADED = 60_000
KEEP_EVERY = 50


def load_jobs(url: str, *, keep_every: int | None) -> None:
    """LOADED Done jobs, then (keep_every) all deleted but one in `keep_every`; vacuumed and analysed."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO jobs (status, owner, owner_group, vo, account, cpu_time, user_priority, priority_class,"
            " submitted_at) SELECT 'Done', 'user' || mod(g, 40), 'group' || mod(g, 7), 'vo', 'group', 3600, 1, 0, now()"
            " FROM generate_series(1, %s) AS g",
            (LOADED,),
        )
        if keep_every is not None:
            conn.execute("DELETE FROM jobs WHERE mod(id, %s) <> 0", (keep_every,))
        conn.execute("VACUUM ANALYZE jobs")


async def sizes(world) -> dict[str, IndexSize]:
    async with read_transaction(world.conn):
        return {index.name: index for index in await IndexDB.of(world.conn).sizes()}


async def purge(world):
    return await retention.purge(world.conn, world.settings, utcnow(), runner="test", scheduled=False)


def rebuilt_count(index: str) -> float:
    return INDEXES_REBUILT.labels(index=index)._value.get()


@pytest.mark.parametrize("template", ["postgresql"], indirect=True)
async def test_the_estimate_matches_a_freshly_built_index(world_of, cloned):
    """What an index needs is estimated within a quarter of its size just built."""
    world = await world_of()
    load_jobs(cloned.url, keep_every=None)
    with psycopg.connect(cloned.url, autocommit=True) as conn:
        conn.execute("REINDEX TABLE jobs")
    found = await sizes(world)
    for name in JOB_INDEXES:
        index = found[name]
        assert index.needed_bytes is not None, name
        assert 0.75 <= index.bytes / index.needed_bytes <= 1.25, (name, index.bytes, index.needed_bytes)
        assert not index.bloated(2.0, 0)


@pytest.mark.parametrize("template", ["postgresql"], indirect=True)
async def test_a_purge_rebuilds_the_bloated_indexes_and_records_it(world_of, cloned):
    world = await world_of(retention={"index_rebuild_min_mb": 0})
    load_jobs(cloned.url, keep_every=KEEP_EVERY)
    before = await sizes(world)
    for name in JOB_INDEXES:
        assert before[name].bloated(2.0, 0), name  # one live entry in fifty: far past its need
    counted = {name: rebuilt_count(name) for name in JOB_INDEXES}

    run = await purge(world)

    rebuilt = {entry["index"]: entry for entry in run["indexes_rebuilt"]}
    assert set(rebuilt) >= JOB_INDEXES
    after = await sizes(world)
    for name in JOB_INDEXES:
        assert rebuilt[name]["bytes_before"] == before[name].bytes
        assert rebuilt[name]["bytes_after"] == after[name].bytes
        assert after[name].bytes * 10 < before[name].bytes, name
        assert not after[name].bloated(2.0, 0), name
        assert rebuilt_count(name) == counted[name] + 1
    shown = (await summary(world.conn, 1, MatchingSettings()))["last_purge"]["indexes_rebuilt"]
    assert {entry["index"] for entry in shown} == set(rebuilt)
    with psycopg.connect(cloned.url) as conn:  # every job kept is still found through each index
        assert conn.execute("SELECT count(*) FROM jobs WHERE owner LIKE 'user%'").fetchone() == (LOADED // KEEP_EVERY,)

    again = await purge(world)  # rebuilt, they are at their need: nothing to do
    assert again["indexes_rebuilt"] == []


@pytest.mark.parametrize("template", ["postgresql"], indirect=True)
async def test_small_waste_or_the_setting_unset_rebuilds_nothing(world_of, cloned):
    load_jobs(cloned.url, keep_every=KEEP_EVERY)  # about 1.5 MiB wasted per index
    for changes in ({"index_rebuild_min_mb": 16}, {"index_rebuild_ratio": 0, "index_rebuild_min_mb": 0}):
        world = await world_of(retention=changes)
        before = await sizes(world)
        assert (await purge(world))["indexes_rebuilt"] == []
        after = await sizes(world)
        assert {n: after[n].bytes for n in JOB_INDEXES} == {n: before[n].bytes for n in JOB_INDEXES}


@pytest.mark.parametrize("template", ["postgresql"], indirect=True)
async def test_an_invalid_copy_left_by_a_cut_rebuild_is_dropped(world_of, cloned, caplog):
    world = await world_of()
    with psycopg.connect(cloned.url, autocommit=True) as conn:
        conn.execute("INSERT INTO jobs (status, owner, owner_group, vo, account, cpu_time, user_priority,"
                     " priority_class, submitted_at) SELECT 'Done', 'same', 'g', 'vo', 'g', 1, 1, 0, now()"
                     " FROM generate_series(1, 10)")  # fmt: skip
        with pytest.raises(psycopg.errors.UniqueViolation):  # fails after creating its invalid index
            conn.execute("CREATE UNIQUE INDEX CONCURRENTLY ix_jobs_owner_id_ccnew ON jobs (owner)")
    async with read_transaction(world.conn):
        assert await IndexDB.of(world.conn).leftovers() == ["ix_jobs_owner_id_ccnew"]
    assert "ix_jobs_owner_id_ccnew" not in await sizes(world)  # an invalid index is never rebuilt

    with caplog.at_level(logging.WARNING, logger="fairmatch.retention"):
        await purge(world)

    assert "dropping ix_jobs_owner_id_ccnew" in caplog.text
    with psycopg.connect(cloned.url) as conn:
        assert conn.execute("SELECT to_regclass('ix_jobs_owner_id_ccnew')").fetchone() == (None,)


@pytest.mark.parametrize("template", ["sqlite"], indirect=True)
async def test_sqlite_has_nothing_to_rebuild(world_of):
    world = await world_of(retention={"index_rebuild_min_mb": 0})
    async with read_transaction(world.conn):
        assert await IndexDB.of(world.conn).sizes() == []
        assert await IndexDB.of(world.conn).leftovers() == []
    run = await purge(world)
    assert run["indexes_rebuilt"] == []
    assert (await summary(world.conn, 1, MatchingSettings()))["last_purge"]["indexes_rebuilt"] == []


def test_the_need_is_unknown_without_statistics():
    never_analysed = IndexSize("ix", "t", 8192 * 100, -1, 90, ((8, "d"),))
    no_widths = IndexSize("ix", "t", 8192 * 100, 1000, 90, ((None, "c"), (8, "d")))
    for index in (never_analysed, no_widths):
        assert index.needed_bytes is None
        assert not index.bloated(2.0, 0)


def test_the_need_follows_entries_widths_and_fillfactor():
    """(varchar of 8 bytes, bigint): 8 + 8 + 8 = 24 bytes an entry, 28 with its line pointer."""
    index = IndexSize("ix", "t", 0, 100_000, 90, ((8, "c"), (8, "d")))
    leaves = math.ceil(100_000 * 28 / (8152 * 0.9))
    assert index.needed_bytes == (1 + leaves + -(-leaves // 200)) * 8192
    packed = IndexSize("ix", "t", 0, 100_000, 100, ((8, "c"), (8, "d")))
    assert packed.needed_bytes is not None and index.needed_bytes is not None
    assert packed.needed_bytes < index.needed_bytes
    misaligned = IndexSize("ix", "t", 0, 100_000, 90, ((3, "c"), (8, "d")))  # 3 + 5 padding + 8
    assert misaligned.needed_bytes == index.needed_bytes
