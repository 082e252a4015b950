"""The site mask as the API changes it, each change in its own transaction.

A change raises the change signal once committed: this process's matcher
applies it before its next match, every other replica within
`matching.refresh_seconds` (its keeper's next poll). Each change is audited.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.clock import utcnow
from fairmatch.db.change_signal import changing
from fairmatch.db.engine import read_transaction
from fairmatch.db.site_mask import SiteMaskDB
from fairmatch.errors import NotFound
from fairmatch.services import audit


async def list_mask(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every banned site, by name."""
    async with read_transaction(conn):
        return await SiteMaskDB.of(conn).all()


async def ban(conn: AsyncConnection, site: str, reason: str, by: str) -> tuple[dict[str, Any], bool]:
    """Ban a site, or give a banned one a new reason: (the entry, newly banned?)."""
    async with changing(conn):
        entry, created = await SiteMaskDB.of(conn).ban(site, reason, by, utcnow())
    await audit.record(conn, by, "site_mask.ban", site, {"reason": reason, "created": created})
    return entry, created


async def allow(conn: AsyncConnection, site: str, by: str) -> None:
    """Take a site out of the mask; NotFound when it is not in it."""
    async with changing(conn):
        allowed = await SiteMaskDB.of(conn).allow(site)
    if not allowed:
        raise NotFound(f"site {site!r} is not in the site mask")
    await audit.record(conn, by, "site_mask.allow", site)
