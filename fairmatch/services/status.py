"""The operator's overview (GET /status), read in one transaction."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.clock import utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.db.groups import GroupDB
from fairmatch.db.retention import RetentionDB
from fairmatch.db.running_samples import RunningSampleDB
from fairmatch.db.server_settings import dangers
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


async def running_history(
    conn: AsyncConnection, since: datetime
) -> tuple[list[tuple[datetime, str, int]], dict[str, float]]:
    """The running-job samples since `since` per group, and each group's configured share."""
    async with read_transaction(conn):
        return await RunningSampleDB.of(conn).running_history(since), await GroupDB.of(conn).group_shares()


async def matches_per_minute(conn: AsyncConnection, now: datetime, minutes: int) -> list[int]:
    """Matches in each of the last `minutes` minutes, oldest first."""
    async with read_transaction(conn):
        return await StatusDB.of(conn).matches_per_minute(now, minutes)
