"""Job classes as the API reads, replaces and deletes them."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.engine import read_transaction
from fairmatch.db.job_classes import JobClassDB
from fairmatch.errors import Conflict, NotFound
from fairmatch.jobs.classes import JobClass, JobClassSpec
from fairmatch.services import audit


async def get_class(conn: AsyncConnection, name: str) -> JobClass:
    async with read_transaction(conn):
        job_class = await JobClassDB.of(conn).get(name)
    if job_class is None:
        raise NotFound(f"job class {name!r} does not exist")
    return job_class


async def load_named(conn: AsyncConnection, names: Iterable[str | None]) -> dict[str, JobClass]:
    """The existing classes among `names` (None ignored), by name; missing ones are simply absent."""
    wanted = {n for n in names if n is not None}
    if not wanted:
        return {}
    async with read_transaction(conn):
        return await JobClassDB.of(conn).named(wanted)


async def put_class(conn: AsyncConnection, name: str, spec: JobClassSpec, *, by: str) -> tuple[JobClass, bool]:
    """Create or replace a class in one transaction, audited as `by`'s; returns (the stored
    class, created?)."""
    async with conn.begin():
        job_class, created = await JobClassDB.of(conn).put(name, spec)
    await audit.record(conn, by, "job_class.put", name, {"asked": spec.model_dump(mode="json"), "created": created})
    return job_class, created


async def delete_class(conn: AsyncConnection, name: str, *, by: str) -> None:
    """Delete a class no waiting job uses, audited as `by`'s: NotFound if missing, Conflict
    while jobs wait in it. Jobs that run or finished keep its name; a submission naming it is then refused (one that
    read the class just before may still queue its jobs, with the priority class it gave them)."""
    async with conn.begin():
        db = JobClassDB.of(conn)
        waiting = await db.waiting_jobs(name)
        if waiting:
            raise Conflict(f"job class {name!r} is used by {waiting} waiting job(s): kill, reschedule or "
                           "change their class first", waiting_jobs=waiting)  # fmt: skip
        if not await db.delete(name):
            raise NotFound(f"job class {name!r} does not exist")
    await audit.record(conn, by, "job_class.delete", name)
