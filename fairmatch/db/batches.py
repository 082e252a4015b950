"""The hot statements of one process that share a round trip (PostgreSQL): claims and
status reports.

When several requests of a process want such a statement run at the same moment,
they are sent together, in one pipeline: one round trip, one transaction, one
WAL flush for all of them. Each statement is the one a request would run alone
(a claim with its own random draw, a report of its own job); a statement sees
what the ones before it wrote, so two claims of a batch never take the same job.

There is no fixed wait: a statement that finds nothing in flight is sent at
once, on its own request's connection. The statements that arrive while a batch
runs wait, and when it returns the first of them sends them all, on its
connection: no connection is needed beyond those the requests already hold.

A batch is one transaction, so one failing statement undoes the others: a
request id claimed twice (a pilot's retry racing its first attempt), or any
other statement the database refuses, has each statement of the batch sent
again alone, so that only the failing one fails. A database that cannot be
reached fails every statement of the batch, as it would have failed each alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.raw import Row, autocommitted, row_of
from fairmatch.errors import DatabaseError, DatabaseUnavailable

Observer = Callable[[int], None]


class _Lead:
    """What a waiting statement is told when the batch before it returned: send the next one."""


LEAD = _Lead()


@dataclass(slots=True)
class _Statement:
    sql: str
    params: dict[str, Any]
    observe: Observer | None
    answer: asyncio.Future[Row | _Lead] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Batches:
    """The hot statements of one process, sent in batches; the process keeps one
    (`fairmatch.services.process.Process.batches`) and hands it to the claims and reports."""

    def __init__(self) -> None:
        self._waiting: list[_Statement] = []
        self._in_flight = False

    async def run(
        self, conn: AsyncConnection, sql: str, params: dict[str, Any], observe: Observer | None = None
    ) -> Row:
        """Run one statement (it answers one row) in the next batch; its answer row. `conn` is
        the caller's, used if this statement sends the batch; `observe` hears how many of the
        batch's statements came with it."""
        statement = _Statement(sql, params, observe)
        self._waiting.append(statement)
        if self._in_flight:
            try:
                answer = await statement.answer
            except asyncio.CancelledError:
                if statement.answer.done() and not statement.answer.cancelled() and statement.answer.result() is LEAD:
                    self._pass_the_lead()  # told to lead, then cancelled: the next one leads
                raise
            if not isinstance(answer, _Lead):
                return answer
            statement.answer = asyncio.get_running_loop().create_future()  # for the batch this statement now sends
        self._in_flight = True
        batch, self._waiting = self._waiting, []
        try:
            await _send(conn, batch)
        finally:
            self._pass_the_lead()
        answer = statement.answer.result()
        assert not isinstance(answer, _Lead)
        return answer

    def _pass_the_lead(self) -> None:
        while self._waiting:
            first = self._waiting[0]
            if not first.answer.done():  # a request cancelled meanwhile leads nothing
                first.answer.set_result(LEAD)
                return
            self._waiting.pop(0)
        self._in_flight = False


async def _send(conn: AsyncConnection, batch: list[_Statement]) -> None:
    """The batch's statements, each answered (a row or an error)."""
    for observe in {c.observe for c in batch if c.observe is not None}:
        observe(sum(c.observe == observe for c in batch))
    try:
        rows = await _pipelined(conn, batch)
    except DatabaseError as exc:
        if len(batch) == 1 or isinstance(exc, DatabaseUnavailable):
            for statement in batch:
                _fail(statement, exc)
            if isinstance(exc, DatabaseUnavailable):
                raise
            return
        for i, statement in enumerate(batch):  # undone together: each again alone, so that only the failing one fails
            try:
                await _send(conn, [statement])
            except BaseException as again:  # the database failed meanwhile: the statements left fail with it
                for rest in batch[i + 1 :]:
                    _fail(rest, again)
                raise
        return
    except BaseException as exc:
        for statement in batch:
            _fail(statement, exc)
        raise
    for statement, row in zip(batch, rows):
        if not statement.answer.done():
            statement.answer.set_result(row)


async def _pipelined(conn: Any, batch: list[_Statement]) -> list[Row]:
    """The batch's statements in one pipeline: one round trip, one transaction."""
    try:
        async with autocommitted(conn) as raw:
            async with raw.pipeline():
                cursors = [await raw.execute(statement.sql, statement.params) for statement in batch]
            rows = []
            for statement, cursor in zip(batch, cursors):
                values = await cursor.fetchone()
                assert values is not None, "a batched statement answers one row"
                rows.append(row_of(statement.sql, cursor, values))
        return rows
    except DatabaseError:
        # After an error the server skips the rest of a pipeline, a statement's preparation
        # included, and psycopg (3.3) may still take that statement for prepared and bind it
        # by name on its next run ("prepared statement ... does not exist"); it does not
        # always forget on DEALLOCATE ALL either. The connection is replaced instead: the
        # next use of `conn` opens a fresh one. Failed batches are rare (a retried request
        # id, an outage), so the cost of a new connection is too.
        await conn.invalidate()
        raise


def _fail(statement: _Statement, exc: BaseException) -> None:
    if not statement.answer.done():
        statement.answer.set_exception(exc)
