"""The SQLite engine: SQLAlchemy's own aiosqlite dialect, as a correct single-writer database."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
import sqlalchemy as sa

from fairmatch.db.engine import create_engine, read_transaction
from fairmatch.errors import UniqueViolation


def _locked_for_writers(path: str) -> bool:
    """Whether another connection, not waiting, is refused the write lock."""
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc)
        return True
    else:
        other.execute("ROLLBACK")
        return False
    finally:
        other.close()


def test_connections_are_set_up_for_one_writer_and_concurrent_readers(tmp_path):
    path = str(tmp_path / "e.db")

    async def scenario():
        engine = create_engine(f"sqlite:///{path}")
        try:
            async with engine.connect() as conn:
                assert conn.dialect.driver == "aiosqlite"
                pragmas = {}
                async with read_transaction(conn):
                    for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous"):
                        pragmas[name] = (await conn.exec_driver_sql(f"PRAGMA {name}")).scalar()
                    assert not _locked_for_writers(path)  # a read takes no write lock
                assert pragmas == {"journal_mode": "wal", "busy_timeout": 30000, "foreign_keys": 1, "synchronous": 1}
                async with conn.begin():  # the write lock from the BEGIN on, before any write
                    assert _locked_for_writers(path)
                assert not _locked_for_writers(path)
        finally:
            await engine.dispose()

    asyncio.run(scenario())


def test_driver_errors_are_fairmatchs_and_roll_back(tmp_path):
    async def scenario():
        engine = create_engine(f"sqlite:///{tmp_path}/e.db")
        try:
            async with engine.begin() as conn:
                await conn.execute(sa.text("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE)"))
                await conn.execute(sa.text("INSERT INTO t (v) VALUES ('x')"))
            with pytest.raises(UniqueViolation) as raised:
                async with engine.begin() as conn:
                    await conn.execute(sa.text("INSERT INTO t (v) VALUES ('y')"))
                    await conn.execute(sa.text("INSERT INTO t (v) VALUES ('x')"))
            assert "UNIQUE constraint failed: t.v" in raised.value.cause  # the driver's word, kept for the log
            async with engine.connect() as conn:  # the failed transaction was rolled back whole
                assert (await conn.execute(sa.text("SELECT count(*) FROM t"))).scalar_one() == 1
        finally:
            await engine.dispose()

    asyncio.run(scenario())
