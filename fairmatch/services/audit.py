"""The audit log: who changed what an operator may change, and when.

Each change is recorded right after it commits, in a transaction of its own: the
change never waits on the log, and a process killed between the two loses the
entry, never the change. What is recorded is what the caller asked for and what
the change did, as JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.clock import as_utc, utcnow
from fairmatch.db.audit import AuditDB
from fairmatch.db.engine import read_transaction


async def record(
    conn: AsyncConnection, actor: str, action: str, target: str | None = None, detail: Mapping[str, Any] | None = None
) -> None:
    """Append one entry: `actor` (a token subject) did `action` to `target`."""
    async with conn.begin():
        await AuditDB.of(conn).append(utcnow(), actor, action, target, dict(detail) if detail is not None else None)


async def entries(
    conn: AsyncConnection,
    *,
    since: datetime | None,
    actor: str | None,
    action: str | None,
    before_id: int | None,
    limit: int,
) -> tuple[list[dict[str, Any]], int | None]:
    """A page of entries, newest first, and the id to continue before (None at the end)."""
    async with read_transaction(conn):
        rows = await AuditDB.of(conn).page(
            since=since, actor=actor, action=action, before_id=before_id, limit=limit + 1
        )
    page = [
        {"id": r.id, "at": as_utc(r.at), "actor": r.actor, "action": r.action, "target": r.target, "detail": r.detail}
        for r in rows[:limit]
    ]
    return page, rows[limit - 1].id if len(rows) > limit else None
