"""This process: what it keeps in memory beside the database, in one place.

- `keeper`: the catalog of task queues that matches draw from, kept current;
- `changes`: the change signal, raised by this process's committed writes of what
  the catalog mirrors, on which the keeper catches up before the next match;
- `batches`: the hot statements (claims, status reports) that share round trips;
- `empty_matches`: the 204s answered and not yet written;
- `drained_groups`: the groups a match left with a task queue run dry;
- `gauges`: the database gauges, cached between scrapes;
- `connections`: the requests' turns for a database connection, and `rng`, the matches' draws.

An app makes its process when it starts (`Process.start`) and keeps it as
`app.state.process`; routes take it from there. The process belongs to its engine, so
code that holds only a connection or an engine reaches the same one with `Process.of`;
an engine no app started (a command's, a test's) gets one of its own on first use.
"""

from __future__ import annotations

import random
from contextlib import AbstractAsyncContextManager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from fairmatch.db.batches import Batches
from fairmatch.db.change_signal import ChangeSignal
from fairmatch.db.engine import RequestConnections
from fairmatch.matching.settings import MatchingSettings
from fairmatch.services.gauges import DatabaseGauges
from fairmatch.services.keeper import Keeper
from fairmatch.services.pilots import EmptyMatchTally
from fairmatch.settings import DatabaseSettings, ServerSettings, Settings

# where an engine keeps its process (an attribute of SQLAlchemy's engine, read in one step)
_ATTRIBUTE = "fairmatch_process"


class DrainedGroups:
    """The groups a match of this process left with a task queue run dry: their share stays
    with their queues still waiting only once their priorities are set again, which the
    background loop does within a second instead of at the next priority run."""

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: set[str] = set()

    def note(self, group: str) -> None:
        self._groups.add(group)

    def take(self) -> set[str]:
        taken, self._groups = self._groups, set()
        return taken


class Process:
    __slots__ = ("batches", "changes", "connections", "drained_groups", "empty_matches", "engine", "gauges",
                 "keeper", "rng")  # fmt: skip

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        matching: MatchingSettings | None = None,
        request_connections: int = DatabaseSettings().pool_size,
        gauges_max_age_seconds: float = ServerSettings().metrics_cache_seconds,
    ) -> None:
        self.engine = engine
        self.changes = ChangeSignal()
        self.keeper = Keeper(matching or MatchingSettings(), self.changes)
        self.batches = Batches()
        self.empty_matches = EmptyMatchTally()
        self.drained_groups = DrainedGroups()
        self.gauges = DatabaseGauges(gauges_max_age_seconds)
        self.connections = RequestConnections(engine, request_connections)
        self.rng = random.Random()
        setattr(engine.sync_engine, _ATTRIBUTE, self)

    @classmethod
    def start(cls, engine: AsyncEngine, settings: Settings) -> Process:
        """The process of an app serving with `settings` on `engine`."""
        return cls(
            engine,
            matching=settings.matching,
            request_connections=settings.database.pool_size,
            gauges_max_age_seconds=settings.server.metrics_cache_seconds,
        )

    @classmethod
    def of(cls, source: AsyncConnection | AsyncEngine) -> Process:
        """The process of this connection's engine (or this engine's)."""
        process: Process | None = getattr(source.sync_engine, _ATTRIBUTE, None)
        if process is None:
            process = cls(source.engine if isinstance(source, AsyncConnection) else source)
        return process


def changing(conn: AsyncConnection) -> AbstractAsyncContextManager[None]:
    """A transaction on `conn` that may write what the matchers mirror: once it has committed,
    this process's keeper hears of it (`fairmatch.db.change_signal`)."""
    return Process.of(conn).changes.changing(conn)
