"""The 204s a process counts before writing them: a failed flush keeps them for the next one."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fairmatch.db.pilots import EmptyMatches, PilotDB
from fairmatch.errors import DatabaseUnavailable
from fairmatch.services.pilots import EmptyMatchTally

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 5, 12, tzinfo=UTC)


class _Conn:
    """A connection whose transactions fail while `down`, and that hands the written counts to `written`."""

    dialect = type("Dialect", (), {"name": "fake"})

    def __init__(self) -> None:
        self.down = True
        self.written: list[list[EmptyMatches]] = []

    @contextlib.asynccontextmanager
    async def begin(self) -> Any:
        if self.down:
            raise DatabaseUnavailable("connection refused")
        yield


class _FakePilotDB(PilotDB, dialect="fake"):
    async def add_empty_matches(self, counts):
        self.conn.written.append(list(counts))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _count(tally: EmptyMatchTally, reference: str, at: datetime, benchmark: float | None = None, **where) -> None:
    place = {"requester": "pilot", "site": "S1", "grid_ce": "ce1", **where}
    tally.count(reference, benchmark=benchmark, at=at, **place)


async def test_a_failed_flush_keeps_its_counts_under_those_that_came_since():
    tally, conn = EmptyMatchTally(), _Conn()
    _count(tally, "a", T0, benchmark=3.0)
    _count(tally, "a", T0 + timedelta(seconds=1))
    _count(tally, "b", T0)
    with pytest.raises(DatabaseUnavailable):
        await tally.flush(conn)  # type: ignore[arg-type]
    assert tally.pending() == 2
    _count(tally, "a", T0 + timedelta(seconds=5), site="S2")  # while the database was away
    conn.down = False
    assert await tally.flush(conn) == 2  # type: ignore[arg-type]
    [written] = conn.written
    assert written == [
        EmptyMatches("a", "pilot", "S2", "ce1", 3.0, T0, T0 + timedelta(seconds=5), 3),
        EmptyMatches("b", "pilot", "S1", "ce1", None, T0, T0, 1),
    ]
    assert tally.pending() == 0
    assert await tally.flush(conn) == 0  # type: ignore[arg-type]
    assert len(conn.written) == 1  # nothing left: no statement
