"""Job-class SQL: the named classes jobs may belong to."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, func, select, update

from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.tables import job_classes, task_queues, tq_jobs
from fairmatch.jobs.classes import JobClass, JobClassSpec


class JobClassDB(AreaDB):
    """Job classes: their priority-class defaults and limits, and who may use them."""

    async def all(self) -> list[JobClass]:
        """Every class, by name."""
        rows = (await self.conn.execute(select(job_classes).order_by(job_classes.c.name))).all()
        return [_from_row(row) for row in rows]

    async def get(self, name: str) -> JobClass | None:
        """One class, or None."""
        row = (await self.conn.execute(select(job_classes).where(job_classes.c.name == name))).first()
        return None if row is None else _from_row(row)

    async def named(self, names: Iterable[str]) -> dict[str, JobClass]:
        """The existing classes among `names`, by name."""
        rows = (await self.conn.execute(select(job_classes).where(job_classes.c.name.in_(sorted(names))))).all()
        return {row.name: _from_row(row) for row in rows}

    async def put(self, name: str, spec: JobClassSpec) -> tuple[JobClass, bool]:
        """Create or replace a class: (the stored class, created?).

        Insert-or-nothing, then update: two concurrent PUTs of a new class never collide.
        """
        values = _values(spec)
        insert = self.insert_ignoring_conflicts(job_classes, "name").values(name=name, **values)
        created = (await self.conn.execute(insert.returning(job_classes.c.name))).first() is not None
        if not created:
            await self.conn.execute(update(job_classes).where(job_classes.c.name == name).values(**values))
        row = (await self.conn.execute(select(job_classes).where(job_classes.c.name == name))).one()
        return _from_row(row), created

    async def waiting_jobs(self, name: str) -> int:
        """How many waiting jobs are queued in the class (in task queues of it)."""
        in_class = select(task_queues.c.id).where(task_queues.c.job_class == name)
        stmt = select(func.count()).select_from(tq_jobs).where(tq_jobs.c.tq_id.in_(in_class))
        return int((await self.conn.execute(stmt)).scalar_one())

    async def delete(self, name: str) -> bool:
        """Delete a class; whether it existed."""
        return (await self.conn.execute(delete(job_classes).where(job_classes.c.name == name))).rowcount > 0


class PostgresJobClassDB(PostgresStatements, JobClassDB, dialect="postgresql"):
    pass


class SQLiteJobClassDB(SQLiteStatements, JobClassDB, dialect="sqlite"):
    pass


def _from_row(row: Any) -> JobClass:
    return JobClass(
        name=row.name,
        default_class=row.default_class,
        max_class=row.max_class,
        allowed_users=frozenset(row.allowed_users),
        allowed_groups=frozenset(row.allowed_groups),
        priority=row.priority,
        description=row.description,
    )


def _values(spec: JobClassSpec) -> dict[str, Any]:
    return {
        "default_class": spec.default_class,
        "max_class": spec.max_class,
        # sorted and de-duplicated, so reads are stable whatever order was sent
        "allowed_users": sorted(set(spec.allowed_users)),
        "allowed_groups": sorted(set(spec.allowed_groups)),
        "priority": spec.priority,
        "description": spec.description,
    }
