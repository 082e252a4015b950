"""Audit-log SQL: entries appended, and read back newest first."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select

from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.tables import audit_log


class AuditDB(AreaDB):
    """The audit log: one row per change an operator made."""

    async def append(self, at: datetime, actor: str, action: str, target: str | None, detail: Any) -> None:
        await self.conn.execute(
            insert(audit_log).values(at=at, actor=actor, action=action, target=target, detail=detail)
        )

    async def page(
        self,
        *,
        since: datetime | None,
        actor: str | None,
        action: str | None,
        before_id: int | None,
        limit: int,
    ) -> Sequence[Any]:
        """Up to `limit` entries, newest first, before entry `before_id` (None: from the newest)."""
        log = audit_log.c
        stmt = select(audit_log)
        if since is not None:
            stmt = stmt.where(log.at >= since)
        if actor is not None:
            stmt = stmt.where(log.actor == actor)
        if action is not None:
            stmt = stmt.where(log.action == action)
        if before_id is not None:
            stmt = stmt.where(log.id < before_id)
        return (await self.conn.execute(stmt.order_by(log.id.desc()).limit(limit))).all()


class PostgresAuditDB(PostgresStatements, AuditDB, dialect="postgresql"):
    pass


class SQLiteAuditDB(SQLiteStatements, AuditDB, dialect="sqlite"):
    pass
