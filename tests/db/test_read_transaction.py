"""`read_transaction` on both backends: what each needs of a read, and nothing more.

PostgreSQL reads in autocommit (READ COMMITTED gives each statement its own snapshot
anyway, so BEGIN and COMMIT were two round trips for nothing); SQLite reads inside a
deferred transaction, one snapshot for all its statements. Either way the connection
writes in real transactions again afterwards.
"""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import func, insert, select

from fairmatch.db.engine import read_transaction
from fairmatch.db.tables import groups

pytestmark = pytest.mark.anyio


async def count_groups(conn) -> int:
    return (await conn.execute(select(func.count()).select_from(groups))).scalar_one()


def a_group(name: str) -> dict:
    return {"name": name, "job_share": 1.0, "job_sharing": False, "properties": [], "allow_background_tqs": False,
            "priority": 0}  # fmt: skip


async def add_group(engine, name: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(groups).values(a_group(name)))


async def test_a_read_takes_what_its_backend_needs(engine, cloned):
    async with engine.connect() as conn:
        if cloned.backend == "postgresql":
            raw = (await conn.get_raw_connection()).driver_connection
            async with read_transaction(conn):
                assert await count_groups(conn) == 0
                assert raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # no BEGIN was sent
                await add_group(engine, "late")
                assert await count_groups(conn) == 1  # each statement its own snapshot, as under READ COMMITTED
            async with conn.begin():
                await count_groups(conn)
                assert raw.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
                isolation = (await conn.exec_driver_sql("SHOW transaction_isolation")).scalar_one()
                assert isolation == "read committed"
        else:
            async with read_transaction(conn):
                assert await count_groups(conn) == 0
                await add_group(engine, "late")  # a writer is not held up by the reader (deferred BEGIN, WAL)
                assert await count_groups(conn) == 0  # the reader's snapshot predates it
            async with read_transaction(conn):
                assert await count_groups(conn) == 1


async def test_after_a_read_the_connection_writes_all_or_nothing_again(engine):
    async with engine.connect() as conn:
        async with read_transaction(conn):
            await count_groups(conn)
        with pytest.raises(RuntimeError):
            async with conn.begin():
                await conn.execute(insert(groups).values(a_group("undone")))
                raise RuntimeError("the request failed half-way")
        async with conn.begin():
            await conn.execute(insert(groups).values(a_group("kept")))
    async with engine.connect() as other:
        names = (await other.execute(select(groups.c.name))).scalars().all()
    assert names == ["kept"]
