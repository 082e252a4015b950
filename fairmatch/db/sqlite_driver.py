"""aiosqlite connections whose statements cost one trip to the driver's thread.

aiosqlite runs SQLite in a thread of its own. Through SQLAlchemy, a statement
makes four trips there and back (open a cursor, execute, fetch the rows, close
the cursor), each a wake-up of both threads: most of what a statement of
fairmatch costs on SQLite. The cursor here does all four in one function on
that thread and keeps the rows, the description, the row count and the last
row id for SQLAlchemy to read without another trip. Everything else is
aiosqlite's own connection (transactions, isolation level, closing).

aiosqlite has no public way to run a function on its thread; `_execute` (and
`_conn`, the sqlite3 connection there) are the ones its own cursor uses, so
the supported aiosqlite versions are pinned in pyproject.toml.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import aiosqlite

Description = tuple[tuple[str, None, None, None, None, None, None], ...] | None


def _run(db: sqlite3.Connection, sql: str, parameters: Any, many: bool) -> tuple[Description, int, int | None, list]:
    """On the driver's thread: the statement, all its rows, and what the cursor says of it."""
    cursor = db.cursor()
    try:
        if many:
            cursor.executemany(sql, parameters)
        else:
            cursor.execute(sql, parameters)
        rows = cursor.fetchall() if cursor.description else []
        # the row count of an UPDATE ... RETURNING is known once its rows are read
        return cursor.description, cursor.rowcount, cursor.lastrowid, rows
    finally:
        cursor.close()


class OneTripCursor:
    """The part of aiosqlite's cursor SQLAlchemy uses, one trip a statement."""

    def __init__(self, connection: OneTripConnection) -> None:
        self._connection = connection
        self.description: Description = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1
        self._rows: list = []

    async def __aenter__(self) -> OneTripCursor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _execute(self, sql: str, parameters: Any, many: bool) -> OneTripCursor:
        self.description, self.rowcount, self.lastrowid, self._rows = await self._connection.on_thread(
            _run, sql, parameters, many
        )
        return self

    async def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = ()) -> OneTripCursor:
        return await self._execute(sql, parameters, False)

    async def executemany(self, sql: str, parameters: Iterable[Sequence[Any] | dict[str, Any]]) -> OneTripCursor:
        return await self._execute(sql, list(parameters), True)

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


class OneTripConnection(aiosqlite.Connection):
    """aiosqlite's connection with the one-trip cursor."""

    def cursor(self) -> OneTripCursor:  # type: ignore[override]
        return OneTripCursor(self)

    async def on_thread(self, function: Callable[..., Any], *args: Any) -> Any:
        """function(sqlite3 connection, *args), run on the driver's thread."""
        return await self._execute(lambda: function(self._conn, *args))


def connector(arguments: tuple[Sequence[Any], dict[str, Any]]) -> Callable[[], Any]:
    """The `async_creator` of an engine: a started OneTripConnection opened with these
    sqlite3.connect arguments (the dialect's own, from the URL)."""
    positional, keywords = arguments

    async def connect() -> OneTripConnection:
        connection = OneTripConnection(lambda: sqlite3.connect(*positional, **keywords), iter_chunk_size=64)
        connection._thread.daemon = True  # as SQLAlchemy does: a forgotten connection never blocks the exit
        await connection  # starts its thread and opens the database
        return connection

    return connect
