"""Groups: configured in TOML, persisted in the database."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.dialect import insert_ignoring_conflicts
from app.db.tables import groups
from app.settings import GroupSettings

JOB_SHARING = "JOB_SHARING"


async def create_missing(conn: AsyncConnection, configured: dict[str, GroupSettings]) -> None:
    """Insert configured groups the database does not know yet; existing ones keep their values."""
    if not configured:
        return
    rows = [
        {
            "name": name,
            "job_share": group.job_share,
            "job_sharing": JOB_SHARING in group.properties,
            "properties": sorted(set(group.properties)),
            "allow_background_tqs": group.allow_background_tqs,
            "priority": group.priority,
        }
        for name, group in sorted(configured.items())
    ]
    async with conn.begin():
        await conn.execute(insert_ignoring_conflicts(conn, groups, "name"), rows)
