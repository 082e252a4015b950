"""Site-limit SQL: the rules, the state they are checked against, the admission check.

Matching reads the limits its pilot is held to at its site (the whole site's,
and those of the CE it runs behind: one indexed lookup; nothing more for a site
without limits), bans the values at their limit, and after claiming a job
checks it in the claim's own transaction (`admit`): on PostgreSQL under a
per-site advisory lock, so that two replicas matching at one site at the same
moment cannot both take the last slot; on SQLite the write lock already
serialises claims. A job that would break a limit is rolled back unclaimed.

The jobs holding a slot are counted per CE they were matched through
(`jobs.grid_ce`, which the claim writes), from the index on (site, grid_ce): a
limit on the whole site counts them all, a CE's limit that CE's.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import TextClause, bindparam, delete, func, insert, select, text

from fairmatch.clock import as_utc
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.change_signal import mark_changed
from fairmatch.db.tables import jobs, site_limit_matches, site_limits, status_in, written_out
from fairmatch.jobs.lifecycle import HOLDING_A_SLOT
from fairmatch.limits.rules import Attribute, Limit, LimitState, Rule, SiteLimits

SITE_LOCK_NAMESPACE = 7_100_010  # with hashtext(site): one advisory lock per site

# Jobs holding a slot, worded as the partial index on (site, grid_ce) words its predicate: whatever
# the plan, the index serves these counts.
_HOLDING = status_in(HOLDING_A_SLOT)
_HOLDING_STATUSES = written_out("holding", sorted(s.value for s in HOLDING_A_SLOT))

# A job's types are in its spec (a JSON list), read for the jobs holding a slot only.
_JOB_TYPE_COUNTS_PG = text(
    """
    SELECT jobs.grid_ce, jt.value, count(*)
    FROM jobs JOIN job_specs ON job_specs.job_id = jobs.id CROSS JOIN LATERAL
         jsonb_array_elements_text(CAST(job_specs.requirements AS jsonb) -> 'job_types') AS jt(value)
    WHERE jobs.site = :site AND jobs.status IN :holding AND jt.value IN :values
    GROUP BY jobs.grid_ce, jt.value"""
).bindparams(bindparam("values", expanding=True), _HOLDING_STATUSES)

_JOB_TYPE_COUNTS_SQLITE = text(
    """
    SELECT jobs.grid_ce, jt.value, count(*)
    FROM jobs JOIN job_specs ON job_specs.job_id = jobs.id, json_each(job_specs.requirements, '$.job_types') AS jt
    WHERE jobs.site = :site AND jobs.status IN :holding AND jt.value IN :values
    GROUP BY jobs.grid_ce, jt.value"""
).bindparams(bindparam("values", expanding=True), _HOLDING_STATUSES)

_LOCK_SITE = text("SELECT pg_advisory_xact_lock(:namespace, hashtext(:site))")


def _limit(row: Any) -> Limit:
    return Limit(row.site, Attribute(row.attribute), row.value, row.running_limit, row.matching_delay, row.grid_ce)


def _row(limit: Limit) -> dict[str, Any]:
    return {
        "site": limit.site,
        "grid_ce": limit.grid_ce,
        "attribute": limit.attribute.value,
        "value": limit.value,
        "running_limit": limit.running_limit,
        "matching_delay": limit.matching_delay,
    }


class LimitDB(AreaDB):
    """Site limits, the jobs holding their slots, and the last match per limited value."""

    job_type_counts: TextClause  # per backend: job types live in a JSON list

    async def running_counts(self, site: str, limits: Iterable[Limit]) -> dict[tuple[str, str, str, str], int]:
        """Jobs holding a slot at `site` that each limit counts, by the limit's key."""
        limits = builtins.list(limits)
        wanted: dict[Attribute, set[str]] = {}
        for limit in limits:
            wanted.setdefault(limit.attribute, set()).add(limit.value)
        per_ce: dict[Attribute, dict[tuple[str | None, str], int]] = {}
        for attribute, values in wanted.items():
            if attribute is Attribute.job_type:
                rows = await self.conn.execute(self.job_type_counts, {"site": site, "values": sorted(values)})
            else:
                column = jobs.c[attribute.value]
                rows = await self.conn.execute(
                    select(jobs.c.grid_ce, column, func.count())
                    .where(jobs.c.site == site, _HOLDING, column.in_(sorted(values)))
                    .group_by(jobs.c.grid_ce, column)
                )
            per_ce[attribute] = {(grid_ce, value): int(n) for grid_ce, value, n in rows}
        return {limit.key: limit.counted(per_ce[limit.attribute]) for limit in limits}

    async def _read(self, site: str | None) -> builtins.list[tuple[Limit, datetime | None]]:
        """The limits (of one site, or all) with the last match time of each."""
        m = site_limit_matches
        query = (
            select(site_limits, m.c.last_match_at)
            .outerjoin(
                m,
                (m.c.site == site_limits.c.site)
                & (m.c.grid_ce == site_limits.c.grid_ce)
                & (m.c.attribute == site_limits.c.attribute)
                & (m.c.value == site_limits.c.value),
            )
            .order_by(site_limits.c.site, site_limits.c.grid_ce, site_limits.c.attribute, site_limits.c.value)
        )
        if site is not None:
            query = query.where(site_limits.c.site == site)
        return [
            (_limit(row), as_utc(row.last_match_at) if row.last_match_at is not None else None)
            for row in await self.conn.execute(query)
        ]

    async def _states(self, read: Iterable[tuple[Limit, datetime | None]]) -> builtins.list[LimitState]:
        """These limits with their running counts."""
        by_site: dict[str, builtins.list[tuple[Limit, datetime | None]]] = {}
        for limit, last in read:
            by_site.setdefault(limit.site, []).append((limit, last))
        states: builtins.list[LimitState] = []
        for site, of_one_site in by_site.items():
            counted = [lim for lim, _ in of_one_site if lim.running_limit is not None]
            running = await self.running_counts(site, counted)
            states += [LimitState(lim, running.get(lim.key, 0), last) for lim, last in of_one_site]
        return states

    async def of_site(self, site: str | None, grid_ce: str | None, now: datetime) -> SiteLimits | None:
        """The limits a pilot at `site` behind `grid_ce` (None: no one CE) is held to, as they stand;
        None when the site has no limits at all. A site whose limits are all other CEs' gives an
        empty set, not None: a claim there must still run with the check the site's limits ask for."""
        if site is None:
            return None
        read = await self._read(site)
        if not read:
            return None
        held = [(lim, last) for lim, last in read if lim.applies_to(site, grid_ce)]
        return SiteLimits(tuple(await self._states(held)), now)

    async def limited_sites(self) -> frozenset[str]:
        """Sites with at least one limit."""
        return frozenset((await self.conn.execute(select(site_limits.c.site).distinct())).scalars())

    async def list(self) -> list[dict[str, Any]]:
        """Every limit with its state, as the API shows it."""
        return [
            {**_row(s.limit), "running": s.running, "last_match_at": s.last_match_at}
            for s in await self._states(await self._read(None))
        ]

    async def replace(self, limits: Sequence[Limit]) -> None:
        """Put this set in place of all limits; match times of limits kept stay.
        In a `changing` transaction."""
        await self.conn.execute(delete(site_limits))
        if limits:
            await self.conn.execute(insert(site_limits), [_row(lim) for lim in limits])
        mark_changed(self.conn)

    async def create_missing(self, limits: Sequence[Limit]) -> None:
        """Insert the limits the database lacks; those it holds keep their (API-edited) values."""
        await self.conn.execute(
            self.insert_ignoring_conflicts(site_limits, "site", "grid_ce", "attribute", "value"),
            [_row(lim) for lim in limits],
        )

    async def admit(
        self, limits: SiteLimits, site: str, job: Any, now: datetime
    ) -> builtins.list[dict[str, Any]]:  # `list` is a method here
        """Check a just-claimed job against the limits its pilot is held to, inside the claim's transaction.

        Returns the limits it breaks (empty: admitted). The claim itself already
        counts as running here (through its pilot's CE, for a CE's limit); a matching delay is taken by moving its last match
        time forward, which only succeeds when the delay has passed.
        """
        job_types = (job.requirements or {}).get("job_types") or []
        applicable = limits.applicable(job.owner, job.owner_group, job_types)
        if not applicable:
            return []
        await self._lock_site(site)
        broken: list[dict[str, Any]] = []
        running = await self.running_counts(site, [lim for lim in applicable if lim.running_limit is not None])
        for lim in applicable:
            where = lim.where()
            count = running.get(lim.key, 0)
            if lim.running_limit is not None and count > lim.running_limit:
                broken.append(
                    {"rule": Rule.running_limit.value, **where, "limit": lim.running_limit, "running": count - 1}
                )
            if lim.matching_delay is not None and not broken and not await self._take_delay(lim, now):
                broken.append({"rule": Rule.matching_delay.value, **where, "delay_seconds": lim.matching_delay})
        return broken

    async def _lock_site(self, site: str) -> None:
        """Serialise admissions at one site (SQLite: the write lock already does)."""

    async def _take_delay(self, limit: Limit, now: datetime) -> bool:
        """Record a match of the limited value unless the last one is closer than the delay."""
        m = site_limit_matches
        statement = (
            self.insert_module.insert(m)
            .values(
                site=limit.site,
                grid_ce=limit.grid_ce,
                attribute=limit.attribute.value,
                value=limit.value,
                last_match_at=now,
            )
            .on_conflict_do_update(
                index_elements=["site", "grid_ce", "attribute", "value"],
                set_={"last_match_at": now},
                where=m.c.last_match_at <= now - timedelta(seconds=limit.matching_delay or 0),
            )
            .returning(m.c.site)
        )
        return (await self.conn.execute(statement)).first() is not None


class PostgresLimitDB(PostgresStatements, LimitDB, dialect="postgresql"):
    job_type_counts = _JOB_TYPE_COUNTS_PG

    async def _lock_site(self, site: str) -> None:
        await self.conn.execute(_LOCK_SITE, {"namespace": SITE_LOCK_NAMESPACE, "site": site})


class SQLiteLimitDB(SQLiteStatements, LimitDB, dialect="sqlite"):
    job_type_counts = _JOB_TYPE_COUNTS_SQLITE
