"""Pilots SQL: the pilots on record, and the empty matches written in bulk.

A pilot's record is written by one rule (`recording`), on both backends: by
the claim that takes a job, in the claim's own transaction (`claimed_by_pilot`,
used by fairmatch/db/claims.py), and by the flush of the 204s a process
answered, counted in memory and added here, every pilot of a flush in one
statement (`add_empty_matches`); a pilot first seen on a 204 is created with
no match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    DateTime,
    Float,
    FromClause,
    Integer,
    String,
    Table,
    bindparam,
    case,
    column,
    func,
    literal,
    literal_column,
    select,
    tuple_,
)
from sqlalchemy.dialects.postgresql import Insert as PostgresInsert
from sqlalchemy.dialects.sqlite import Insert as SQLiteInsert

from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements, model_of
from fairmatch.db.tables import jobs, pilots
from fairmatch.matching.pilots import PilotSummary


@dataclass(frozen=True, slots=True)
class EmptyMatches:
    """The 204s one pilot got since the last flush."""

    reference: str
    requester: str
    site: str
    grid_ce: str | None
    benchmark: float | None  # None: keep the one on record
    first_at: datetime
    last_at: datetime
    count: int


@dataclass(frozen=True, slots=True)
class PilotFilter:
    """What a listing asks for; `requester` None means every pilot (the caller's scope)."""

    site: str | None = None
    since: datetime | None = None
    reference: str | None = None
    requester: str | None = None


# the order of the listing, newest first; the cursor is the last row's key in it
Cursor = tuple[datetime, str]

_EMPTY_COLUMNS = ("reference", "requester", "site", "grid_ce", "benchmark", "first_seen", "last_seen", "empty_matches")


def recording(stmt: PostgresInsert | SQLiteInsert) -> Any:
    """An insert of pilot records that updates the record of a pilot already known: its latest
    requester, site and CE, its benchmark when it gave one, the later of the two last-seen times
    (a claim may be written after the 204s it follows), the matches and empty matches added, and
    the job it took last (kept by a record that took none)."""
    new = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[pilots.c.reference],
        set_={
            "requester": new.requester,
            "site": new.site,
            "grid_ce": new.grid_ce,
            "benchmark": func.coalesce(new.benchmark, pilots.c.benchmark),
            "last_seen": case((new.last_seen > pilots.c.last_seen, new.last_seen), else_=pilots.c.last_seen),
            "matches": pilots.c.matches + new.matches,
            "empty_matches": pilots.c.empty_matches + new.empty_matches,
            "current_job_id": func.coalesce(new.current_job_id, pilots.c.current_job_id),
        },
    )


def claimed_by_pilot(insert: Callable[[Table], Any], job_id: ColumnElement[Any], *source: FromClause) -> Any:
    """The record of the pilot that claimed `job_id` (read from `source`, if any): one match more.

    Its values are the claim's parameters (pilot_reference, requester, site, grid_ce,
    benchmark, now); a claim whose pilot names no reference, or a hand-off that names no
    site, puts no pilot on record. `insert` is the backend's (`postgresql.insert`, `sqlite.insert`).
    """
    reference = bindparam("pilot_reference", type_=pilots.c.reference.type)
    site = bindparam("site", type_=pilots.c.site.type)
    now = bindparam("now", type_=pilots.c.last_seen.type)
    values = select(
        reference.label("reference"),
        bindparam("requester", type_=pilots.c.requester.type).label("requester"),
        site.label("site"),
        bindparam("grid_ce", type_=pilots.c.grid_ce.type).label("grid_ce"),
        bindparam("benchmark", type_=pilots.c.benchmark.type).label("benchmark"),
        now.label("first_seen"),
        now.label("last_seen"),
        literal_column("1").label("matches"),
        literal_column("0").label("empty_matches"),
        job_id.label("current_job_id"),
    )
    if source:
        values = values.select_from(*source)
    values = values.where(reference.is_not(None), site.is_not(None))
    return recording(insert(pilots).from_select([c.name for c in values.selected_columns], values))


def pilot_of(row: Any) -> PilotSummary:
    """A pilots row as the API shows it."""
    return model_of(PilotSummary, row)


class PilotDB(AreaDB):
    """The pilots table."""

    async def add_empty_matches(self, counts: Sequence[EmptyMatches]) -> None:
        """Add the 204s of these pilots (distinct references), creating those not on record."""
        raise NotImplementedError

    async def page(self, where: PilotFilter, after: Cursor | None, limit: int) -> list[Any]:
        """Up to `limit` pilots after the cursor, newest first (first seen, then reference, descending)."""
        stmt = select(pilots)
        if where.site is not None:
            stmt = stmt.where(pilots.c.site == where.site)
        if where.since is not None:
            stmt = stmt.where(pilots.c.first_seen >= where.since)
        if where.reference is not None:
            stmt = stmt.where(pilots.c.reference == where.reference)
        if where.requester is not None:
            stmt = stmt.where(pilots.c.requester == where.requester)
        if after is not None:
            stmt = stmt.where(
                tuple_(pilots.c.first_seen, pilots.c.reference)
                < tuple_(literal(after[0], DateTime(timezone=True)), literal(after[1], String))
            )
        stmt = stmt.order_by(pilots.c.first_seen.desc(), pilots.c.reference.desc()).limit(limit)
        return list((await self.conn.execute(stmt)).all())

    async def per_site(self, since: datetime) -> list[Any]:
        """Per site, the pilots last seen since `since`, the jobs they took and the times
        they were sent away empty (site, pilots, matches, empty_matches), most empty first."""
        stmt = (
            select(pilots.c.site, func.count().label("pilots"), func.sum(pilots.c.matches).label("matches"),
                   func.sum(pilots.c.empty_matches).label("empty_matches"))
            .where(pilots.c.last_seen >= since)
            .group_by(pilots.c.site)
            .order_by(func.sum(pilots.c.empty_matches).desc(), pilots.c.site)
        )  # fmt: skip
        return list((await self.conn.execute(stmt)).all())

    async def sites(self) -> list[str]:
        """Every site a pilot on record reported, by name (a scan: for rare operator checks)."""
        stmt = select(pilots.c.site).distinct().order_by(pilots.c.site)
        return list((await self.conn.execute(stmt)).scalars())

    async def get(self, reference: str, requester: str | None) -> Any | None:
        """One pilot; None when it is not on record or not the requester's (None: any requester's)."""
        stmt = select(pilots).where(pilots.c.reference == reference)
        if requester is not None:
            stmt = stmt.where(pilots.c.requester == requester)
        return (await self.conn.execute(stmt)).first()

    async def job_ids(self, reference: str) -> list[int]:
        """The jobs this pilot took, oldest first (the partial index ix_jobs_pilot_reference)."""
        stmt = (
            select(jobs.c.id)
            .where(jobs.c.pilot_reference == reference, jobs.c.pilot_reference.isnot(None))
            .order_by(jobs.c.id)
        )
        return list((await self.conn.execute(stmt)).scalars())


def _row(c: EmptyMatches) -> dict[str, Any]:
    return {
        "reference": c.reference,
        "requester": c.requester,
        "site": c.site,
        "grid_ce": c.grid_ce,
        "benchmark": c.benchmark,
        "first_seen": c.first_at,
        "last_seen": c.last_at,
        "empty_matches": c.count,
    }


_ARRAY_TYPES = {
    "reference": ARRAY(String),
    "requester": ARRAY(String),
    "site": ARRAY(String),
    "grid_ce": ARRAY(String),
    "benchmark": ARRAY(Float),
    "first_seen": ARRAY(DateTime(timezone=True)),
    "last_seen": ARRAY(DateTime(timezone=True)),
    "empty_matches": ARRAY(Integer),
}


def _postgres_flush() -> Any:
    """One statement for any number of pilots: the values arrive as one array per column."""
    rows = (
        func.unnest(*(bindparam(name, type_=_ARRAY_TYPES[name]) for name in _EMPTY_COLUMNS))
        .table_valued(*(column(name) for name in _EMPTY_COLUMNS))
        .render_derived(name="counted")
    )
    source = select(*(rows.c[name] for name in _EMPTY_COLUMNS), literal(0, Integer).label("matches"))
    stmt = PostgresInsert(pilots).from_select([*_EMPTY_COLUMNS, "matches"], source)
    return recording(stmt)


_POSTGRES_FLUSH = _postgres_flush()


# A flush locks its pilots' rows in one order, a batch of claims in the order its requests
# came: each could hold a row the other waits for. The flush gives way at once instead of
# waiting for the deadlock detector, which might pick the claims; its counts wait a second.
_GIVE_WAY = "SET LOCAL lock_timeout = '100ms'"


class PostgresPilotDB(PostgresStatements, PilotDB, dialect="postgresql"):
    async def add_empty_matches(self, counts: Sequence[EmptyMatches]) -> None:
        if counts:
            rows = [_row(c) for c in counts]
            await self.conn.exec_driver_sql(_GIVE_WAY)
            await self.conn.execute(_POSTGRES_FLUSH, {name: [r[name] for r in rows] for name in _EMPTY_COLUMNS})


_SQLITE_FLUSH = recording(
    SQLiteInsert(pilots).values(
        {name: bindparam(name, type_=pilots.c[name].type) for name in _EMPTY_COLUMNS} | {"matches": 0}
    )
)


class SQLitePilotDB(SQLiteStatements, PilotDB, dialect="sqlite"):
    async def add_empty_matches(self, counts: Sequence[EmptyMatches]) -> None:
        # SQLite has no arrays: the one statement is executed for each pilot, in one transaction
        if counts:
            await self.conn.execute(_SQLITE_FLUSH, [_row(c) for c in counts])
