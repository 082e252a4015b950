"""Groups' SQL: their configuration, and what each policy reads of it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select, update

from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.change_signal import mark_changed
from fairmatch.db.tables import groups, task_queues
from fairmatch.priority.dirac import GroupPolicy
from fairmatch.priority.rank import RankGroup


def _group(row: Any) -> dict[str, Any]:
    return {
        "name": row.name,
        "job_share": row.job_share,
        "properties": sorted(row.properties),
        "job_sharing": row.job_sharing,
        "allow_background_tqs": row.allow_background_tqs,
        "priority": row.priority,
        "description": row.description,
        "configured": True,
    }


class GroupDB(AreaDB):
    """The fair-share groups: share, properties, priority level."""

    async def create_missing_groups(self, rows: list[dict[str, Any]]) -> None:
        """Insert the groups (rows with `name`) the table lacks; existing ones keep their values."""
        await self.conn.execute(self.insert_ignoring_conflicts(groups, "name"), rows)

    async def all_groups(self, visible: frozenset[str] | None = None) -> list[dict[str, Any]]:
        """All groups by name; `visible` (when not None) restricts them to those names."""
        query = select(groups).order_by(groups.c.name)
        if visible is not None:
            query = query.where(groups.c.name.in_(sorted(visible)))
        return [_group(row) for row in (await self.conn.execute(query)).all()]

    async def queued_groups(self, visible: frozenset[str] | None = None) -> list[str]:
        """The owner groups of the task queues (their waiting jobs), by name; `visible` as above."""
        query = select(task_queues.c.owner_group).distinct().order_by(task_queues.c.owner_group)
        if visible is not None:
            query = query.where(task_queues.c.owner_group.in_(sorted(visible)))
        return list((await self.conn.execute(query)).scalars())

    async def delete_group(self, name: str) -> bool:
        """Delete a group's configuration; whether it existed. In a `changing` transaction."""
        gone = (await self.conn.execute(delete(groups).where(groups.c.name == name))).rowcount > 0
        if gone:
            mark_changed(self.conn)
        return gone

    async def group(self, name: str) -> dict[str, Any] | None:
        """One group, or None."""
        row = (await self.conn.execute(select(groups).where(groups.c.name == name))).first()
        return None if row is None else _group(row)

    async def put_group(self, name: str, values: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create or replace a group: (the stored group, created?). In a `changing` transaction."""
        # Insert-or-nothing first, then update: on PostgreSQL a concurrent creator
        # makes the insert wait and do nothing, so two PUTs of a new group never
        # collide; on SQLite BEGIN IMMEDIATE serialises them.
        insert_new = self.insert_ignoring_conflicts(groups, "name").values(name=name, **values)
        created = (await self.conn.execute(insert_new.returning(groups.c.name))).first() is not None
        if not created:
            await self.conn.execute(update(groups).where(groups.c.name == name).values(**values))
        row = (await self.conn.execute(select(groups).where(groups.c.name == name))).one()
        mark_changed(self.conn)
        return _group(row), created

    async def sharing_groups(self) -> frozenset[str]:
        """Groups with JOB_SHARING (matched by group alone)."""
        return frozenset(
            (await self.conn.execute(select(groups.c.name).where(groups.c.job_sharing.is_(True)))).scalars()
        )

    async def group_policies(self) -> dict[str, GroupPolicy]:
        """What the dirac policy needs of each group."""
        rows = await self.conn.execute(
            select(groups.c.name, groups.c.job_share, groups.c.job_sharing, groups.c.allow_background_tqs)
        )
        return {name: GroupPolicy(share, sharing, background) for name, share, sharing, background in rows}

    async def rank_groups(self) -> dict[str, RankGroup]:
        """What the rank policy needs of each group."""
        rows = await self.conn.execute(select(groups.c.name, groups.c.job_share, groups.c.priority))
        return {name: RankGroup(job_share=share, priority=level) for name, share, level in rows}

    async def group_levels(self) -> dict[str, int]:
        """Each group's priority level."""
        return dict((await self.conn.execute(select(groups.c.name, groups.c.priority))).all())

    async def group_shares(self) -> dict[str, float]:
        """Each group's configured share."""
        return dict((await self.conn.execute(select(groups.c.name, groups.c.job_share))).all())


class PostgresGroupDB(PostgresStatements, GroupDB, dialect="postgresql"):
    pass


class SQLiteGroupDB(SQLiteStatements, GroupDB, dialect="sqlite"):
    pass
