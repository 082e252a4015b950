"""The read-at-once aiosqlite cursor answers as aiosqlite's own does, the service's engine uses it
(its errors: test_sqlite_engine.py), and a connection nobody closed never holds a process at its exit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import sqlalchemy as sa

from fairmatch.db import sqlite_driver
from fairmatch.db.engine import create_engine


def test_the_cursor_keeps_rows_counts_and_ids_of_each_statement(tmp_path):
    async def scenario():
        connect = sqlite_driver.connector(([str(tmp_path / "t.db")], {"isolation_level": None}))
        db = await connect()
        try:
            cursor = db.cursor()
            await cursor.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
            await cursor.executemany("INSERT INTO t (v) VALUES (?)", [("a",), ("b",), ("c",)])
            assert cursor.rowcount == 3 and cursor.description is None
            await cursor.execute("INSERT INTO t (v) VALUES (:v)", {"v": "d"})
            assert cursor.lastrowid == 4
            await cursor.execute("UPDATE t SET v = v || '!' WHERE id > 1 RETURNING id, v")
            assert [d[0] for d in cursor.description] == ["id", "v"]
            assert cursor.rowcount == 3  # known once the rows are read, as they are at once
            assert await cursor.fetchone() == (2, "b!")
            assert await cursor.fetchmany(1) == [(3, "c!")]
            assert await cursor.fetchall() == [(4, "d!")]
            assert await cursor.fetchall() == []
        finally:
            await db.close()

    asyncio.run(scenario())


def test_the_service_engine_uses_it(tmp_path):
    async def scenario():
        engine = create_engine(f"sqlite:///{tmp_path}/e.db")
        try:
            async with engine.connect() as conn:
                raw = (await conn.get_raw_connection()).driver_connection
                assert isinstance(raw, sqlite_driver.ReadAtOnceConnection)
                assert (await conn.execute(sa.text("SELECT 7"))).scalar_one() == 7
        finally:
            await engine.dispose()

    asyncio.run(scenario())


def test_a_process_that_never_disposed_its_engine_still_exits(tmp_path):
    script = textwrap.dedent(f"""
        import asyncio, sqlalchemy as sa
        from fairmatch.db.engine import create_engine
        engines = []
        async def main():
            engines.append(create_engine("sqlite:///{tmp_path}/x.db"))
            async with engines[0].connect() as conn:  # back in the pool, open, never closed
                print((await conn.execute(sa.text("SELECT 1"))).scalar_one())
        asyncio.run(main())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
