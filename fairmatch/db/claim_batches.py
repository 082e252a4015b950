"""Claims of one process that share a round trip (PostgreSQL).

When several requests of a process want a claim at the same moment, their
claim statements are sent together, in one pipeline: one round trip, one
transaction, one WAL flush for all of them. Each statement is the claim a
request would run alone, with its own random draw; a statement sees what the
ones before it claimed, so two requests of a batch never take the same job.

There is no fixed wait: a claim that finds nothing in flight is sent at once,
on its own request's connection. The claims that arrive while a batch runs
wait, and when it returns the first of them sends them all, on its
connection: no connection is needed beyond those the requests already hold.

A batch is one transaction, so one failing statement undoes the others: a
request id claimed twice (a pilot's retry racing its first attempt) then
has each claim of the batch sent again alone, so that only the duplicate
fails. A database that cannot be reached fails every claim of the batch, as
it would have failed each alone.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from fairmatch.db.raw import Row, autocommitted, row_of
from fairmatch.errors import DatabaseError, UniqueViolation

Observer = Callable[[int], None]


class _Lead:
    """What a waiting claim is told when the batch before it returned: send the next one."""


LEAD = _Lead()


@dataclass(slots=True)
class _Claim:
    sql: str
    params: dict[str, Any]
    observe: Observer | None
    answer: asyncio.Future[Row | _Lead] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class ClaimBatches:
    """The claims of one engine's process, sent in batches."""

    def __init__(self) -> None:
        self._waiting: list[_Claim] = []
        self._in_flight = False

    async def claim(
        self, conn: AsyncConnection, sql: str, params: dict[str, Any], observe: Observer | None = None
    ) -> Row:
        """Run one claim statement in the next batch; its answer row. `conn` is the
        caller's, used if this claim sends the batch; `observe` hears the batch's size."""
        claim = _Claim(sql, params, observe)
        self._waiting.append(claim)
        if self._in_flight:
            try:
                answer = await claim.answer
            except asyncio.CancelledError:
                if claim.answer.done() and not claim.answer.cancelled() and claim.answer.result() is LEAD:
                    self._pass_the_lead()  # told to lead, then cancelled: the next one leads
                raise
            if not isinstance(answer, _Lead):
                return answer
            claim.answer = asyncio.get_running_loop().create_future()  # for the batch this claim now sends
        self._in_flight = True
        batch, self._waiting = self._waiting, []
        try:
            await _send(conn, batch)
        finally:
            self._pass_the_lead()
        answer = claim.answer.result()
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


async def _send(conn: AsyncConnection, batch: list[_Claim]) -> None:
    """The batch's claims, each answered (a row or an error)."""
    for observe in {c.observe for c in batch if c.observe is not None}:
        observe(len(batch))
    try:
        rows = await _pipelined(conn, batch)
    except UniqueViolation as exc:
        if len(batch) == 1:
            _fail(batch[0], exc)
            return
        for i, claim in enumerate(batch):  # undone together: each again alone, so that only the duplicate fails
            try:
                await _send(conn, [claim])
            except BaseException as again:  # the database failed meanwhile: the claims left fail with it
                for rest in batch[i + 1 :]:
                    _fail(rest, again)
                raise
        return
    except BaseException as exc:
        for claim in batch:
            _fail(claim, exc)
        raise
    for claim, row in zip(batch, rows):
        if not claim.answer.done():
            claim.answer.set_result(row)


async def _pipelined(conn: Any, batch: list[_Claim]) -> list[Row]:
    """The batch's statements in one pipeline: one round trip, one transaction."""
    try:
        async with autocommitted(conn) as raw:
            async with raw.pipeline():
                cursors = [await raw.execute(claim.sql, claim.params) for claim in batch]
            rows = []
            for claim, cursor in zip(batch, cursors):
                values = await cursor.fetchone()
                assert values is not None, "a claim statement answers one row, claimed or not"
                rows.append(row_of(claim.sql, cursor.description, values))
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


def _fail(claim: _Claim, exc: BaseException) -> None:
    if not claim.answer.done():
        claim.answer.set_exception(exc)


_BATCHES: weakref.WeakKeyDictionary[Any, ClaimBatches] = weakref.WeakKeyDictionary()


def batches_of(engine: AsyncEngine) -> ClaimBatches:
    """The one batcher of this engine's process."""
    batches = _BATCHES.get(engine.sync_engine)
    if batches is None:
        batches = _BATCHES[engine.sync_engine] = ClaimBatches()
    return batches
