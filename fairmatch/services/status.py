"""The operator's overview (GET /status) and the console's, each read in one transaction."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.clock import utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.db.groups import GroupDB
from fairmatch.db.limits import LimitDB
from fairmatch.db.pilots import PilotDB
from fairmatch.db.retention import RetentionDB
from fairmatch.db.running_samples import RunningSampleDB
from fairmatch.db.server_settings import dangers
from fairmatch.db.site_mask import SiteMaskDB
from fairmatch.db.status import ACTIVE, StatusDB
from fairmatch.matching.drift import DRIFT_SAMPLES, share_drift
from fairmatch.matching.settings import MatchingSettings


async def summary(conn: AsyncConnection, top: int, matching: MatchingSettings) -> dict[str, Any]:
    """Jobs per group and in total, the match rate, the `top` busiest queues, the last priority
    run, the last purge, the database server's dangerous settings, and the drift of the
    achieved shares that a `matching` setting explains."""
    now = utcnow()
    async with read_transaction(conn):
        status = StatusDB.of(conn)
        waiting, waiting_cpu, busiest = await status.waiting(top)
        groups = await status.jobs_per_group(waiting)
        samples = await RunningSampleDB.of(conn).latest_running(DRIFT_SAMPLES) if matching.prefer_longest_cpu else []
        drifts = share_drift(samples, await GroupDB.of(conn).group_shares(), waiting_cpu, matching)
        return {
            "generated_at": now,
            "totals": {s.lower(): sum(g[s.lower()] for g in groups) for s in ACTIVE},
            "groups": groups,
            "match_rate": await status.match_rate(now),
            "top_task_queues": busiest,
            "last_priority_run": await status.last_priority_run(),
            "last_purge": await RetentionDB.of(conn).last_run(),
            "database_warnings": dangers(await status.server_settings()),
            "share_drift": [asdict(d) | {"message": d.message} for d in drifts],
        }


async def database_warnings(conn: AsyncConnection) -> list[dict[str, Any]]:
    """The database server's settings that break what fairmatch promises (PostgreSQL)."""
    async with read_transaction(conn):
        return dangers(await StatusDB.of(conn).server_settings())


@dataclass(frozen=True, slots=True)
class Activity:
    """What the console's overview charts, beside the summary."""

    running: list[tuple[datetime, str, int]]  # each sample's running jobs per group, oldest first
    shares: dict[str, float]  # each group's configured share
    matches_per_minute: list[int]  # oldest first
    per_site: list[Any]  # PilotDB.per_site's rows


async def activity(
    conn: AsyncConnection, *, since: datetime, now: datetime, minutes: int, pilots_since: datetime
) -> Activity:
    """The running-job samples since `since`, the matches in each of the last `minutes`
    minutes before `now`, and per site the pilots last seen since `pilots_since`."""
    async with read_transaction(conn):
        return Activity(
            running=await RunningSampleDB.of(conn).running_history(since),
            shares=await GroupDB.of(conn).group_shares(),
            matches_per_minute=await StatusDB.of(conn).matches_per_minute(now, minutes),
            per_site=await PilotDB.of(conn).per_site(pilots_since),
        )


@dataclass(frozen=True, slots=True)
class Sites:
    """What the console shows of sites, beside the latest pilots."""

    mask: list[dict[str, Any]]  # every banned site, by name
    limits: list[dict[str, Any]]  # every site limit with its running count and last match
    per_site: list[Any]  # PilotDB.per_site's rows


async def sites(conn: AsyncConnection, pilots_since: datetime) -> Sites:
    """The site mask, the site limits, and per site the pilots last seen since `pilots_since`."""
    async with read_transaction(conn):
        return Sites(
            mask=await SiteMaskDB.of(conn).all(),
            limits=await LimitDB.of(conn).list(),
            per_site=await PilotDB.of(conn).per_site(pilots_since),
        )
