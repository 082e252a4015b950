"""Running jobs other systems report (reported_running): one source's counts replaced at a time."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, insert

from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements, chunks
from fairmatch.db.tables import reported_running


class ReportedRunningDB(AreaDB):
    """What each source last reported running, per (group, owner)."""

    async def replace(self, source: str, counts: Sequence[tuple[str, str, int]], at: datetime) -> None:
        await self.conn.execute(delete(reported_running).where(reported_running.c.source == source))
        rows = [
            {"source": source, "owner_group": group, "owner": owner, "running": running, "reported_at": at}
            for group, owner, running in counts
        ]
        for part in chunks(rows):
            await self.conn.execute(insert(reported_running), list(part))


class PostgresReportedRunningDB(PostgresStatements, ReportedRunningDB, dialect="postgresql"):
    pass


class SQLiteReportedRunningDB(SQLiteStatements, ReportedRunningDB, dialect="sqlite"):
    pass
