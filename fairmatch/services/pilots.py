"""Pilots on record: reading them, and the empty matches a process counts before writing them.

A match that takes a job records its pilot in the claim itself. A match that
finds nothing (a 204) writes nothing on the request's path: the process counts
it here, per pilot reference, and the background loop adds the counts of every
pilot in one statement each second (`flush`), and once more at shutdown. A
flush that fails keeps its counts for the next one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.clock import as_utc
from fairmatch.db.engine import read_transaction
from fairmatch.db.pilots import Cursor, EmptyMatches, PilotDB, PilotFilter, pilot_of
from fairmatch.errors import NotFound
from fairmatch.matching.pilots import Pilot, PilotSummary


@dataclass(slots=True)
class _Pending:
    requester: str
    site: str
    grid_ce: str | None
    benchmark: float | None
    first_at: datetime
    last_at: datetime
    count: int


class EmptyMatchTally:
    """The 204s this process answered and has not written yet, by pilot reference
    (`fairmatch.services.process.Process.empty_matches`)."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}
        self._flushing = asyncio.Lock()

    def count(
        self, reference: str, *, requester: str, site: str, grid_ce: str | None, benchmark: float | None, at: datetime
    ) -> None:
        """One more 204 for this pilot; the latest place and benchmark win."""
        seen = self._pending.get(reference)
        if seen is None:
            self._pending[reference] = _Pending(requester, site, grid_ce, benchmark, at, at, 1)
            return
        seen.requester, seen.site, seen.grid_ce, seen.last_at = requester, site, grid_ce, at
        if benchmark is not None:
            seen.benchmark = benchmark
        seen.count += 1

    def pending(self) -> int:
        """Pilots with 204s not written yet."""
        return len(self._pending)

    async def flush(self, conn: AsyncConnection) -> int:
        """Write the counts in one transaction; how many pilots it wrote. A flush waits for
        the one in progress, so when it returns every 204 counted before it is written."""
        async with self._flushing:
            taken, self._pending = self._pending, {}
            if not taken:
                return 0
            counts = [
                EmptyMatches(ref, p.requester, p.site, p.grid_ce, p.benchmark, p.first_at, p.last_at, p.count)
                for ref, p in sorted(taken.items())  # one lock order for every process's flush
            ]
            try:
                async with conn.begin():
                    await PilotDB.of(conn).add_empty_matches(counts)
            except BaseException:
                self._keep(taken)
                raise
            return len(counts)

    def _keep(self, taken: dict[str, _Pending]) -> None:
        """Counts a failed flush took back in, under what came since (which is newer)."""
        for reference, old in taken.items():
            new = self._pending.get(reference)
            if new is None:
                self._pending[reference] = old
                continue
            new.count += old.count
            new.first_at = old.first_at
            if new.benchmark is None:
                new.benchmark = old.benchmark


async def list_pilots(
    conn: AsyncConnection, where: PilotFilter, after: Cursor | None, limit: int
) -> tuple[list[PilotSummary], Cursor | None]:
    """One page, newest first, and the cursor to continue after (None at the end)."""
    async with read_transaction(conn):
        rows = await PilotDB.of(conn).page(where, after, limit + 1)
    page = [pilot_of(r) for r in rows[:limit]]
    last = rows[limit - 1] if len(rows) > limit else None
    return page, None if last is None else (as_utc(last.first_seen), last.reference)


async def get_pilot(conn: AsyncConnection, reference: str, requester: str | None) -> Pilot:
    """One pilot with the jobs it took; `requester` set: only if it is that requester's."""
    async with read_transaction(conn):
        pilot_db = PilotDB.of(conn)
        row = await pilot_db.get(reference, requester)
        if row is None:
            # another requester's pilot is as missing as an unknown one: its existence is not revealed
            raise NotFound(f"pilot {reference!r} is not on record")
        job_ids = await pilot_db.job_ids(reference)
    return Pilot(**pilot_of(row).model_dump(), job_ids=job_ids)
