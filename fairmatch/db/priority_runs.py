"""Priority runs' SQL: each run's report, with the share corrections it applied."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Text, cast, delete, func, insert, select

from fairmatch.clock import as_utc
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.tables import priority_runs
from fairmatch.priority.corrections import UNCORRECTED, ShareCorrections

# transaction-scoped advisory lock: one priority run (or provisional refresh) at a time
PRIORITY_LOCK = 7_100_001


class PriorityRunDB(AreaDB):
    """The priority loop's runs, the latest first."""

    async def record_run(self, run: dict[str, Any], corrections: ShareCorrections) -> tuple[int, dict[str, Any]]:
        """Store one run (priority_runs columns) with the share corrections it applied, which
        its report keeps beside what the policy reported; its id and its report as stored."""
        report = {**run["report"], **_corrections_report(corrections)}
        stmt = insert(priority_runs).values(**{**run, "report": report}).returning(priority_runs.c.id)
        return (await self.conn.execute(stmt)).scalar_one(), report

    async def prune_runs(self, newest_id: int, keep: int) -> None:
        """Delete all runs but the `keep` up to `newest_id`."""
        await self.conn.execute(delete(priority_runs).where(priority_runs.c.id <= newest_id - keep))

    async def last_run_finished(self) -> datetime | None:
        """When the latest run finished."""
        return as_utc((await self.conn.execute(select(func.max(priority_runs.c.finished_at)))).scalar())

    async def latest_run(self) -> dict[str, Any] | None:
        """The latest run: who ran it, when, over how many TQs, and its report."""
        # the report as its text, decoded here with orjson: a run over 10,000 TQs writes
        # megabytes, which the driver's json module took some 60 ms to read
        pr = priority_runs
        stmt = select(pr.c.runner, pr.c.started_at, pr.c.finished_at, pr.c.task_queues, cast(pr.c.report, Text))
        row = (await self.conn.execute(stmt.order_by(pr.c.id.desc()).limit(1))).first()
        if row is None:
            return None
        return {
            "runner": row.runner,
            "started_at": as_utc(row.started_at),
            "finished_at": as_utc(row.finished_at),
            "task_queues": row.task_queues,
            "report": orjson.loads(row[4]),
        }

    async def latest_corrections(self) -> ShareCorrections:
        """The share corrections the latest run applied (none before the first run)."""
        report = await self.latest_report()
        return UNCORRECTED if report is None else _corrections_of(report)

    async def latest_report(self) -> dict[str, Any] | None:
        """The latest run's report alone."""
        return (
            await self.conn.execute(select(priority_runs.c.report).order_by(priority_runs.c.id.desc()).limit(1))
        ).scalar()


def _corrections_report(corrections: ShareCorrections) -> dict[str, Any]:
    """The corrections as a run's report keeps them (GET /shares shows the first two keys)."""
    return {
        "corrections_enabled": corrections.enabled,
        "corrections": dict(corrections.explained),
        "correction_factors": {
            "groups": dict(corrections.groups),
            "owners": [[group, owner, factor] for (group, owner), factor in sorted(corrections.owners.items())],
        },
    }


def _corrections_of(report: dict[str, Any]) -> ShareCorrections:
    """The corrections kept in a run's report (`_corrections_report`)."""
    factors = report.get("correction_factors") or {}  # runs recorded before the factors were kept have none
    return ShareCorrections(
        enabled=report.get("corrections_enabled", False),
        groups=dict(factors.get("groups", {})),
        owners={(group, owner): factor for group, owner, factor in factors.get("owners", [])},
        explained=report.get("corrections", {}),
    )


class PostgresPriorityRunDB(PostgresStatements, PriorityRunDB, dialect="postgresql"):
    pass


class SQLitePriorityRunDB(SQLiteStatements, PriorityRunDB, dialect="sqlite"):
    pass
