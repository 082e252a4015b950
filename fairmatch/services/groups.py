"""Groups as the start-up and the API create, read and replace them."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.engine import read_transaction
from fairmatch.db.groups import GroupDB
from fairmatch.errors import NotFound
from fairmatch.priority.groups import GroupUpdate, stored_values
from fairmatch.priority.settings import GroupSettings
from fairmatch.services.process import changing


async def create_missing(conn: AsyncConnection, configured: dict[str, GroupSettings]) -> None:
    """Insert configured groups the database does not know yet; existing ones keep their values,
    so edits made over the API survive restarts."""
    if not configured:
        return
    rows = [
        {"name": name, **stored_values(g.job_share, g.properties, g.allow_background_tqs, g.priority)}
        for name, g in sorted(configured.items())
    ]
    async with conn.begin():
        await GroupDB.of(conn).create_missing_groups(rows)


async def list_groups(conn: AsyncConnection, visible: frozenset[str] | None = None) -> list[dict[str, Any]]:
    """All groups by name, with the groups of waiting jobs that have no configuration (as the
    policies see them: the defaults); `visible` (when not None) restricts them to those names."""
    async with read_transaction(conn):
        db = GroupDB.of(conn)
        configured = await db.all_groups(visible)
        queued = await db.queued_groups(visible)
    known = {group["name"] for group in configured}
    unconfigured = [_unconfigured(name) for name in queued if name not in known]
    return sorted(configured + unconfigured, key=lambda group: group["name"])


def _unconfigured(name: str) -> dict[str, Any]:
    defaults = GroupUpdate()
    values = stored_values(defaults.job_share, defaults.properties, defaults.allow_background_tqs, defaults.priority)
    return {"name": name, **values, "configured": False}


async def get_group(conn: AsyncConnection, name: str, visible: frozenset[str] | None = None) -> dict[str, Any]:
    """One group; a group outside `visible` is as missing as one that does not exist."""
    if visible is not None and name not in visible:
        raise NotFound(f"group {name!r} does not exist")
    async with read_transaction(conn):
        group = await GroupDB.of(conn).group(name)
    if group is None:
        raise NotFound(f"group {name!r} does not exist")
    return group


async def delete_group(conn: AsyncConnection, name: str) -> None:
    """Forget a group's configuration: its jobs stay, at the defaults. NotFound if it had none."""
    async with changing(conn):
        if not await GroupDB.of(conn).delete_group(name):
            raise NotFound(f"group {name!r} is not configured")


async def put_group(conn: AsyncConnection, name: str, spec: GroupUpdate) -> tuple[dict[str, Any], bool]:
    """Create or replace a group in one transaction; returns (the stored group, created?).
    This process's matcher hears of it before its next match."""
    values = stored_values(spec.job_share, spec.properties, spec.allow_background_tqs, spec.priority, spec.description)
    async with changing(conn):
        return await GroupDB.of(conn).put_group(name, values)
