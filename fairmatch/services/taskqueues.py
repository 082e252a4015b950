"""Task queues: reading them, and the changes that run in transactions of their own.

Each change runs in a `changing` transaction: this process's matcher hears
of it once it has committed. A deletion is no such change (`TaskQueueDB.delete_if_empty`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.console_queues import ConsoleQueueDB, QueueListing, Waiting
from fairmatch.db.engine import read_transaction
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.errors import Conflict, ConstraintViolation, NotFound
from fairmatch.services.process import changing


async def queued(conn: AsyncConnection, arrivals: Mapping[int, Counter[float]], *, new_jobs: bool) -> None:
    """Count committed jobs that entered TQs, per level (`TaskQueueDB.count_arrivals`).

    After the jobs' own commit, in a short transaction: the TQ rows are locked
    only for the count, not for a whole submission.
    """
    if not arrivals:
        return
    async with changing(conn):
        await TaskQueueDB.of(conn).count_arrivals(arrivals, new_jobs=new_jobs)


async def delete_if_empty(conn: AsyncConnection, tq_id: int) -> bool:
    """Delete the TQ if it holds no job. True if deleted."""
    try:
        async with conn.begin():
            return await TaskQueueDB.of(conn).delete_if_empty(tq_id)
    except ConstraintViolation:
        return False  # a job arrived after all: the TQ stays


async def delete_task_queue(conn: AsyncConnection, tq_id: int) -> None:
    """Delete an empty TQ now (DIRAC's deleteTaskQueueIfEmpty): 404 when it does not exist,
    409 while it holds jobs (or a submission is filling it)."""
    if not await delete_if_empty(conn, tq_id):
        found = await read_task_queues(conn, [tq_id])
        if not found:
            raise NotFound(f"task queue {tq_id} does not exist")
        raise Conflict(f"task queue {tq_id} holds {found[0]['jobs']} waiting job(s): it is deleted once empty")


async def delete_all_empty(conn: AsyncConnection, unchanged_for: timedelta = timedelta(0)) -> int:
    """Sweep: delete every TQ without jobs that has not changed for `unchanged_for`,
    each in its own transaction. How many went."""
    async with conn.begin():
        empty = await TaskQueueDB.of(conn).empty_ids(unchanged_for)
    deleted = 0
    for tq_id in empty:
        deleted += await delete_if_empty(conn, tq_id)
    return deleted


async def read_task_queues(conn: AsyncConnection, ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """TQs (all, or these) as the API shows them."""
    async with read_transaction(conn):
        return await TaskQueueDB.of(conn).read(ids)


async def listing_page(conn: AsyncConnection, listing: QueueListing) -> tuple[int, list[Any], dict[int, Waiting]]:
    """The console's page of queues: how many pass its filters, its slice, and their waiting jobs."""
    async with read_transaction(conn):
        db = ConsoleQueueDB.of(conn)
        total = await db.count(listing)
        found = await db.page(listing)
        return total, found, await db.waiting([row.id for row in found])


async def waiting_in(conn: AsyncConnection, tq_id: int) -> Waiting | None:
    """One queue's waiting jobs per level, and its oldest; None when it has none."""
    async with read_transaction(conn):
        return (await ConsoleQueueDB.of(conn).waiting([tq_id])).get(tq_id)
