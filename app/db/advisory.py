"""Transaction-scoped leader locks.

PostgreSQL: advisory locks held until the transaction ends, so a process
that dies mid-run releases its lock with its connection. SQLite: writing
transactions already hold the database write lock (BEGIN IMMEDIATE), so
only one process can be inside anyway.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.dialect import is_postgresql


async def try_lock(conn: AsyncConnection, key: int) -> bool:
    """Take the lock if free; False if another transaction holds it."""
    if not is_postgresql(conn):
        return True
    return bool((await conn.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": key})).scalar())


async def lock(conn: AsyncConnection, key: int) -> None:
    """Wait for the lock."""
    if is_postgresql(conn):
        await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
