"""What a process checks and creates in the database before it serves."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from fairmatch.db import migrate
from fairmatch.limits import rules as limit_rules
from fairmatch.services import groups, limits
from fairmatch.settings import Settings


class SchemaOutOfDate(RuntimeError):
    pass


async def prepare_database(engine: AsyncEngine, settings: Settings) -> None:
    """Refuse a schema that is not at this release's head; create the configured groups
    and site limits the database lacks (those it holds keep their API-edited values)."""
    head = migrate.head_revision(settings.database_url)
    async with engine.connect() as conn:
        current = await migrate.current_revision(conn)
    if current != head:
        raise SchemaOutOfDate(
            f"database schema is at revision {current or 'none'}, this fairmatch needs {head}: "
            "run `fairmatch db upgrade`"
        )
    async with engine.connect() as conn:
        await groups.create_missing(conn, settings.groups)
        await limits.create_missing(conn, limit_rules.from_settings(settings.site_limits))
