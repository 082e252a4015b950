"""The 204s' flush on PostgreSQL gives way to whoever holds a pilot's row (a batch of claims
may, and may wait for a row the flush holds): it fails fast, keeps its counts, and the next
flush writes them."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import select, update

from fairmatch.clock import utcnow
from fairmatch.db.tables import pilots
from fairmatch.errors import DatabaseError
from fairmatch.services.pilots import EmptyMatchTally

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("template", ["postgresql"], indirect=True)]


def _count(tally: EmptyMatchTally, reference: str, times: int) -> None:
    for _ in range(times):
        tally.count(reference, requester="pilot", site="LCG.CERN.cern", grid_ce=None, benchmark=None, at=utcnow())


async def _empty_matches(engine: Any) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(pilots.c.reference, pilots.c.empty_matches))
        return {r.reference: r.empty_matches for r in rows}


async def test_a_flush_meeting_a_held_pilot_row_gives_way_and_keeps_its_counts(engine):
    tally = EmptyMatchTally()
    _count(tally, "p-a", 1)
    async with engine.connect() as conn:
        await tally.flush(conn)
    _count(tally, "p-a", 2)
    _count(tally, "p-b", 3)
    async with engine.connect() as holder, engine.connect() as flusher:
        async with holder.begin():  # a claim of pilot p-a in flight
            await holder.execute(update(pilots).where(pilots.c.reference == "p-a").values(matches=pilots.c.matches + 1))
            started = time.monotonic()
            with pytest.raises(DatabaseError):
                await tally.flush(flusher)
            assert time.monotonic() - started < 0.9  # well before the deadlock detector's second
        assert tally.pending() == 2
        assert await tally.flush(flusher) == 2
    assert await _empty_matches(engine) == {"p-a": 3, "p-b": 3}
