"""Site limits as the API and the start-up change them, each change in its own transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.engine import read_transaction
from fairmatch.db.limits import LimitDB
from fairmatch.limits.rules import Limit
from fairmatch.services.process import changing


async def list_limits(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every limit with its running count and last match time."""
    async with read_transaction(conn):
        return await LimitDB.of(conn).list()


async def replace_limits(conn: AsyncConnection, limits: Sequence[Limit]) -> None:
    """The whole set at once; this process's matcher hears of it before its next match."""
    async with changing(conn):
        await LimitDB.of(conn).replace(limits)


async def create_missing(conn: AsyncConnection, limits: Sequence[Limit]) -> None:
    """The configured limits the database lacks (start-up)."""
    if not limits:
        return
    async with conn.begin():
        await LimitDB.of(conn).create_missing(limits)
