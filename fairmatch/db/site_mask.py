"""Site-mask SQL: the banned sites, who banned them and why.

Every process's catalog mirrors the set of banned sites (`fairmatch/services/keeper.py`
reads `sites` with the task queues), so a ban or an allow raises the change
signal: this process applies it before its next match, the others at their
next poll.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, select

from fairmatch.clock import as_utc
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.change_signal import mark_changed
from fairmatch.db.tables import site_mask


def _entry(row: Any) -> dict[str, Any]:
    return {"site": row.site, "reason": row.reason, "banned_at": as_utc(row.banned_at), "banned_by": row.banned_by}


class SiteMaskDB(AreaDB):
    """The site mask: one row per banned site."""

    async def all(self) -> list[dict[str, Any]]:
        """Every banned site, by name."""
        rows = await self.conn.execute(select(site_mask).order_by(site_mask.c.site))
        return [_entry(row) for row in rows]

    async def sites(self) -> frozenset[str]:
        """The names of the banned sites (what matching reads)."""
        return frozenset((await self.conn.execute(select(site_mask.c.site))).scalars())

    async def ban(self, site: str, reason: str, by: str, now: datetime) -> tuple[dict[str, Any], bool]:
        """Ban the site, or give a banned one a new reason: (the entry, newly banned?).

        A site banned again keeps `banned_at`, the time it has been banned since;
        its reason and `banned_by` become the new ones. Insert-or-nothing, then
        update: two concurrent bans of one site never collide. In a `changing` transaction.
        """
        inserted = await self.conn.execute(
            self.insert_ignoring_conflicts(site_mask, "site")
            .values(site=site, reason=reason, banned_at=now, banned_by=by)
            .returning(site_mask.c.site)
        )
        created = inserted.first() is not None
        if created:
            mark_changed(self.conn)
        else:
            await self.conn.execute(
                site_mask.update().where(site_mask.c.site == site).values(reason=reason, banned_by=by)
            )
        row = (await self.conn.execute(select(site_mask).where(site_mask.c.site == site))).one()
        return _entry(row), created

    async def allow(self, site: str) -> bool:
        """Take the site out of the mask; False when it was not in it. In a `changing` transaction."""
        removed = await self.conn.execute(delete(site_mask).where(site_mask.c.site == site).returning(site_mask.c.site))
        if removed.first() is None:
            return False
        mark_changed(self.conn)
        return True


class PostgresSiteMaskDB(PostgresStatements, SiteMaskDB, dialect="postgresql"):
    pass


class SQLiteSiteMaskDB(SQLiteStatements, SiteMaskDB, dialect="sqlite"):
    pass
