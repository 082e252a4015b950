"""Statements on the driver's own connection, for the hot paths.

A claim or a status report is one statement; SQLAlchemy's execution layer
around it (compiling, result proxies, its async adapter's greenlet hop) would
cost the service as much CPU as the database spends on it. These run on the
psycopg connection underneath a checked-out `AsyncConnection`, in autocommit
mode (one statement is its own transaction: no BEGIN and COMMIT round trips).
Driver errors become fairmatch's as the engine's do, and a broken connection (or
one to a server that refuses writes) is dropped from the pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.errors import refused_as_read_only, translated
from fairmatch.errors import DatabaseError


class Row:
    """Attribute access to a result row by column name."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


@asynccontextmanager
async def autocommitted(conn: AsyncConnection) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """The driver connection of `conn` in autocommit mode, for as long as the block runs."""
    raw = (await conn.get_raw_connection()).driver_connection
    assert isinstance(raw, psycopg.AsyncConnection), "a checked-out PostgreSQL connection has its driver's"
    try:
        await raw.set_autocommit(True)
        try:
            yield raw
        finally:
            if not raw.closed:
                await raw.set_autocommit(False)
    except psycopg.Error as exc:
        # a standby's connection (read-only) is as useless to a claim as a broken one, and so is
        # one left mid-statement (a pipeline the server cut off: its reset then fails, and that
        # error would otherwise hide the lost connection)
        stuck = raw.info.transaction_status in (TransactionStatus.ACTIVE, TransactionStatus.UNKNOWN)
        broken = raw.broken or raw.closed or stuck or refused_as_read_only(exc)
        if broken:
            await conn.invalidate()
        wrapped = DBAPIError.instance(None, None, exc, psycopg.Error, connection_invalidated=broken)
        raise (translated(wrapped) or DatabaseError(str(exc))) from exc


def row_of(sql: str, cursor: psycopg.AsyncCursor[Any], values: Sequence[Any]) -> Row:
    """A row of `sql`'s answer (`values`, read from `cursor`) by column name."""
    names = _COLUMNS.get(sql)
    if names is None or len(names) != len(values):  # first run, or the table gained columns
        description = cursor.description
        assert description is not None, "a statement that returned a row describes it"
        names = _COLUMNS[sql] = [c.name for c in description]
    return Row(dict(zip(names, values)))


# the answer's column names per statement: a cursor builds its description anew each
# time it is read, which costs more than the rest of the row's decoding
_COLUMNS: dict[str, list[str]] = {}
