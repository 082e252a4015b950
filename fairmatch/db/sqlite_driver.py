"""aiosqlite connections whose statements cost one or two trips to the driver's thread.

aiosqlite runs SQLite in a thread of its own. Through SQLAlchemy's adaption, a
statement makes four trips there and back (open a cursor, execute, fetch the rows,
close the cursor), each a wake-up of both threads: most of what a statement of
fairmatch costs on SQLite. The cursor here runs the statement with the connection's
own `execute` (one trip, which opens the cursor too) and, when the statement answers
rows, reads them all with a second; the description, the row count and the last row
id are then the cursor's own, read without a trip. It needs no close: a statement
read to its end holds nothing. Only aiosqlite's public API is used.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import aiosqlite

Description = tuple[tuple[str, None, None, None, None, None, None], ...] | None


class ReadAtOnceCursor:
    """The part of a DB-API cursor SQLAlchemy's async adaption uses, the rows read at once."""

    def __init__(self, connection: aiosqlite.Connection) -> None:
        self._connection = connection
        self.description: Description = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1
        self._rows: list = []

    async def __aenter__(self) -> ReadAtOnceCursor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _took(self, cursor: aiosqlite.Cursor) -> ReadAtOnceCursor:
        self.description = cursor.description
        self._rows = list(await cursor.fetchall()) if cursor.description else []
        # the row count of an UPDATE ... RETURNING is known once its rows are read
        self.rowcount, self.lastrowid = cursor.rowcount, cursor.lastrowid
        return self

    async def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = ()) -> ReadAtOnceCursor:
        return await self._took(await self._connection.execute(sql, parameters))

    async def executemany(self, sql: str, parameters: Iterable[Sequence[Any] | dict[str, Any]]) -> ReadAtOnceCursor:
        return await self._took(await self._connection.executemany(sql, list(parameters)))

    async def fetchall(self) -> list:
        rows, self._rows = self._rows, []
        return rows

    async def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    async def fetchmany(self, size: int | None = None) -> list:
        size = self.arraysize if size is None else size
        rows, self._rows = self._rows[:size], self._rows[size:]
        return rows

    async def close(self) -> None:
        self._rows = []


class ReadAtOnceConnection(aiosqlite.Connection):
    """aiosqlite's connection with the read-at-once cursor."""

    def cursor(self) -> ReadAtOnceCursor:  # type: ignore[override]
        return ReadAtOnceCursor(self)


def connector(arguments: tuple[Sequence[Any], dict[str, Any]]) -> Callable[[], Any]:
    """The `async_creator` of an engine: a started ReadAtOnceConnection opened with these
    sqlite3.connect arguments (the dialect's own, from the URL)."""
    positional, keywords = arguments

    def new() -> ReadAtOnceConnection:
        return ReadAtOnceConnection(lambda: sqlite3.connect(*positional, **keywords), iter_chunk_size=64)

    async def connect() -> ReadAtOnceConnection:
        connection = _made_in_a_daemon_thread(new)
        await connection  # starts its thread and opens the database
        return connection

    return connect


def _made_in_a_daemon_thread(make: Callable[[], ReadAtOnceConnection]) -> ReadAtOnceConnection:
    """make(), called in a daemon thread. A thread is a daemon when the thread that creates it
    is one, and aiosqlite creates the connection's thread with the connection: a connection
    nobody closed (an engine not disposed) then never holds the process at its exit, as
    SQLAlchemy's own aiosqlite connections do not."""
    made: list[ReadAtOnceConnection] = []
    maker = threading.Thread(target=lambda: made.append(make()), daemon=True)
    maker.start()
    maker.join()
    return made[0]
