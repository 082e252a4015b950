"""Keeps this process's catalog of task queues current.

- Every `matching.refresh_seconds` it reads the TQ rows whose `changed_at`
  is later than its last read, less `matching.refresh_margin_seconds` (a
  transaction that wrote a row before the last read may commit after it), or
  than the latest change it holds if that is earlier; plus the JOB_SHARING
  groups, the sites with limits and the site mask.
- Every `matching.reload_seconds` it reads the ids of all TQs, and TQs that
  other processes deleted leave the copy (when they have come to outnumber
  the TQs left, the copy is built anew from the whole table).
- Before a match, it catches up at once if this process changed task queues,
  groups, limits or the site mask itself since its last read; and before
  answering that nothing is eligible, if its last read is older than
  `matching.refresh_seconds` or a TQ changed after the latest change it holds.

So a TQ created by another process is matchable at once by a pilot that
would otherwise get nothing, and within refresh_seconds plus one read
(0.25 s by default) by every pilot; one created by this process at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from fairmatch.clock import as_utc
from fairmatch.db.change_signal import ChangeSignal
from fairmatch.db.engine import read_transaction
from fairmatch.db.groups import GroupDB
from fairmatch.db.limits import LimitDB
from fairmatch.db.site_mask import SiteMaskDB
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.errors import DatabaseError
from fairmatch.matching.catalog import Catalog
from fairmatch.matching.settings import MatchingSettings

log = logging.getLogger("fairmatch.matching")


# rows applied between two yields to the event loop: a refresh after a priority run
# touches every TQ, and requests must not wait for all of them
CHUNK = 500


class Keeper:
    def __init__(self, settings: MatchingSettings, changes: ChangeSignal) -> None:
        self.settings = settings
        self.changes = changes  # this process's own writes, caught up on before a match
        self.catalog = Catalog()
        self._read_until: datetime | None = None  # the database's time of the last read
        self._read_at = -float("inf")  # time.monotonic() of the last read
        self._swept_at = time.monotonic()
        self._generation = -1
        self._lock = asyncio.Lock()

    def stale(self) -> bool:
        return time.monotonic() - self._read_at > self.settings.refresh_seconds

    async def current(self, conn: AsyncConnection) -> Catalog:
        """The catalog, first brought up to date if this process changed what it mirrors."""
        if self.changes.generation != self._generation:
            await self.refresh(conn, unless_current=True)
        return self.catalog

    async def behind(self, conn: AsyncConnection) -> bool:
        """Whether a TQ changed after the latest change this copy holds (one index probe)."""
        async with read_transaction(conn):
            latest = await TaskQueueDB.of(conn).latest_change()
        known = self.catalog.latest_change
        return latest is not None and (known is None or latest > known)

    async def refresh(self, conn: AsyncConnection, *, unless_current: bool = False, sweep: bool = False) -> None:
        """Read what changed; with `sweep` (or once per reload_seconds) also drop the TQs
        other processes deleted, which an exact count of the queues needs."""
        async with self._lock:
            generation = self.changes.generation
            if unless_current and generation == self._generation:
                return  # another request caught up while this one waited
            sweep = sweep or time.monotonic() - self._swept_at > self.settings.reload_seconds
            # a copy holding many deleted TQs is built anew (their positions are reclaimed)
            rebuild = sweep and self.catalog.wasted() > max(1000, len(self.catalog))
            since = None
            if not rebuild and self._read_until is not None:
                since = self._read_until - timedelta(seconds=self.settings.refresh_margin_seconds)
                # a writer that stalled past the margin committed a change older than that: `behind`
                # finds it (later than the latest change held), so the read goes back that far too
                held = self.catalog.latest_change
                since = None if held is None else min(since, as_utc(held))
            async with read_transaction(conn):
                task_queues = TaskQueueDB.of(conn)
                now, rows = await task_queues.changed_since(since, whole=since is None)
                if since is not None:  # the state of each TQ changed; the whole of those this copy lacks
                    rows = await _with_requirements(task_queues, self.catalog, rows)
                sharing = await GroupDB.of(conn).sharing_groups()
                limited = await LimitDB.of(conn).limited_sites()
                masked = await SiteMaskDB.of(conn).sites()
                existing = await task_queues.all_ids() if sweep and not rebuild else None
            catalog = Catalog() if rebuild else self.catalog
            for start in range(0, len(rows), CHUNK):
                if start:
                    await asyncio.sleep(0)
                catalog.apply(row._mapping for row in rows[start : start + CHUNK])
            if existing is not None:
                catalog.remove([tq_id for tq_id in catalog.entries if tq_id not in existing])
            catalog.sharing_groups = sharing
            catalog.limited_sites = limited
            catalog.masked_sites = masked
            self.catalog = catalog
            self._read_until = now
            self._read_at = time.monotonic()
            if sweep:
                self._swept_at = self._read_at
            self._generation = generation

    async def run(self, engine: AsyncEngine) -> None:
        """The polling loop of one process."""
        while True:
            try:
                async with engine.connect() as conn:
                    await self.refresh(conn)
            except DatabaseError as exc:  # an outage: matching answers 503 meanwhile
                log.warning("task-queue refresh failed: %s", exc.cause)
            except Exception:
                log.exception("task-queue refresh failed")
            await asyncio.sleep(self.settings.refresh_seconds)


async def _with_requirements(task_queues: TaskQueueDB, catalog: Catalog, rows: list[Any]) -> list[Any]:
    """`rows` (the changed state of TQs), each TQ `catalog` does not know replaced by its
    whole row, or left out when it was deleted since. A poll reads each change again for
    its margin: reading only the state keeps that cheap."""
    unknown = {row.id for row in rows if not catalog.knows(row.id, row.requirements_hash)}
    if not unknown:
        return rows
    whole = {row.id: row for row in await task_queues.matching_rows(list(unknown))}
    return [whole[row.id] if row.id in unknown else row for row in rows if row.id in whole or row.id not in unknown]
