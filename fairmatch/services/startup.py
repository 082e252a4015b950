"""What a process checks and creates in the database before it serves."""

from __future__ import annotations

import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from fairmatch.db import migrate
from fairmatch.db.limits import LimitDB
from fairmatch.limits import rules as limit_rules
from fairmatch.services import groups, status
from fairmatch.settings import Settings

log = logging.getLogger("fairmatch.startup")


class SchemaOutOfDate(RuntimeError):
    pass


async def prepare_database(engine: AsyncEngine, settings: Settings) -> None:
    """Refuse a schema that is not at this release's head; create the configured groups
    and site limits the database lacks (those it holds keep their API-edited values); warn of
    the database server's settings that break what fairmatch promises."""
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
        configured_limits = limit_rules.from_settings(settings.site_limits)
        if configured_limits:
            async with conn.begin():
                await LimitDB.of(conn).create_missing(configured_limits)
        for warning in await status.database_warnings(conn):
            log.warning(
                "PostgreSQL runs with %s = %s: %s", warning["setting"], warning["value"], warning["cost"],
                extra={"setting": warning["setting"]},
            )  # fmt: skip
