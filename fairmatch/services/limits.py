"""Site limits as an operator replaces them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.engine import read_transaction
from fairmatch.db.limits import LimitDB
from fairmatch.limits.rules import Limit
from fairmatch.services import audit
from fairmatch.services.process import changing


async def replace_limits(
    conn: AsyncConnection, limits: Sequence[Limit], *, by: str, asked: dict[str, Any]
) -> list[dict[str, Any]]:
    """The whole set at once, audited with what `by` asked; this process's matcher hears of
    it before its next match. Every limit as it then stands, with its running count."""
    async with changing(conn):
        await LimitDB.of(conn).replace(limits)
    await audit.record(conn, by, "site_limits.put", None, {"asked": asked})
    async with read_transaction(conn):
        return await LimitDB.of(conn).list()
