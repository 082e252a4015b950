"""The association tree in the database: replaced whole, read back in the dump's order.

`position` is the row's index in the dump, so reading in position order
gives the imported text back byte for byte (see app.accounting.associations).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.accounting.associations import Association, Tree, build_tree
from app.db.dialect import is_postgresql
from app.db.engine import read_transaction
from app.db.tables import associations


async def replace_associations(conn: AsyncConnection, rows: Sequence[Association]) -> int:
    """Make `rows` (already validated) the whole tree, in one transaction; returns their number.

    Readers see the old tree or the new one, never a mix. Concurrent
    replacements are serialised: on PostgreSQL by a table lock that still
    lets readers in (under READ COMMITTED a second DELETE would not see the
    first one's fresh rows, and its INSERT would then collide with them); on
    SQLite by BEGIN IMMEDIATE.
    """
    values = [
        {"position": i, "account": r.account, "user": r.user, "parent": r.parent, "shares": r.shares}
        for i, r in enumerate(rows)
    ]
    async with conn.begin():
        if is_postgresql(conn):
            await conn.execute(text("LOCK TABLE associations IN EXCLUSIVE MODE"))
        await conn.execute(delete(associations))
        if values:
            await conn.execute(insert(associations), values)
    return len(values)


async def select_associations(conn: AsyncConnection) -> list[Association]:
    """The stored rows in the dump's order, inside the caller's transaction."""
    c = associations.c
    result = await conn.execute(select(c.account, c.shares, c.parent, c.user).order_by(c.position))
    return [Association(account=r.account, shares=r.shares, parent=r.parent, user=r.user) for r in result]


async def load_associations(conn: AsyncConnection) -> list[Association]:
    """The stored rows in the dump's order, in a read transaction of their own."""
    async with read_transaction(conn):
        return await select_associations(conn)


async def load_tree(conn: AsyncConnection) -> Tree | None:
    """The stored tree; None when no dump was imported. Its own read transaction."""
    rows = await load_associations(conn)
    return build_tree(rows) if rows else None
