"""The site mask as the API changes it, each change in its own transaction.

A change raises the change signal once committed: this process's matcher
applies it before its next match, every other replica within
`matching.refresh_seconds` (its keeper's next poll). Each change is audited.

A site is known when a pilot on record reported it (`sighting`): the one rule by which
the API, the command line and the console warn before a ban of a name no pilot ever
sent, most often a misspelt one.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.clock import utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.db.pilots import PilotDB
from fairmatch.db.site_mask import SiteMaskDB
from fairmatch.errors import NotFound
from fairmatch.services import audit
from fairmatch.services.process import changing

SIMILAR = 3  # known sites offered for an unknown one
LIKENESS = 0.75  # how alike (difflib's ratio, ignoring case) a known site must be to be offered


async def sighting(conn: AsyncConnection, site: str) -> dict[str, Any]:
    """Whether a pilot on record reported the site, whether it is banned, and (when no pilot
    reported it) the known sites whose names are most like it and the warning to show."""
    async with read_transaction(conn):
        known = await PilotDB.of(conn).sites()
        banned = site in await SiteMaskDB.of(conn).sites()
    if site in known:
        return {"site": site, "reported": True, "banned": banned, "similar": [], "warning": None}
    similar = similar_sites(site, known)
    warning = f"site {site} has never been reported by a pilot; known sites like it: {', '.join(similar) or 'none'}"
    return {"site": site, "reported": False, "banned": banned, "similar": similar, "warning": warning}


def similar_sites(site: str, known: list[str]) -> list[str]:
    """The known sites most like `site`, best first; case and a slip of the keys aside."""
    by_folded: dict[str, str] = {}
    for name in known:
        by_folded.setdefault(name.casefold(), name)
    found = get_close_matches(site.casefold(), list(by_folded), n=SIMILAR, cutoff=LIKENESS)
    return [by_folded[name] for name in found]


async def ban(conn: AsyncConnection, site: str, reason: str, by: str) -> tuple[dict[str, Any], bool]:
    """Ban a site, or give a banned one a new reason: (the entry with whether a pilot
    reported the site, newly banned?)."""
    seen = await sighting(conn, site)
    async with changing(conn):
        entry, created = await SiteMaskDB.of(conn).ban(site, reason, by, utcnow())
    detail = {"reason": reason, "created": created, "reported": seen["reported"]}
    await audit.record(conn, by, "site_mask.ban", site, detail)
    return {**entry, "reported": seen["reported"], "similar": seen["similar"], "warning": seen["warning"]}, created


async def allow(conn: AsyncConnection, site: str, by: str) -> None:
    """Take a site out of the mask; NotFound when it is not in it."""
    async with changing(conn):
        allowed = await SiteMaskDB.of(conn).allow(site)
    if not allowed:
        raise NotFound(f"site {site!r} is not in the site mask")
    await audit.record(conn, by, "site_mask.allow", site)
