"""Task queues: their deletion (an operator's, the sweep's) and the console's pages of them.

A deletion is no change the matchers are signalled of (`TaskQueueDB.delete_if_empty`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.console_queues import ConsoleQueueDB, QueueListing, Waiting
from fairmatch.db.engine import read_transaction
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.errors import Conflict, ConstraintViolation, NotFound
from fairmatch.services import audit
from fairmatch.taskqueues.views import TaskQueue


async def delete_if_empty(conn: AsyncConnection, tq_id: int) -> bool:
    """Delete the TQ if it holds no job. True if deleted."""
    try:
        async with conn.begin():
            return await TaskQueueDB.of(conn).delete_if_empty(tq_id)
    except ConstraintViolation:
        return False  # a job arrived after all: the TQ stays


async def delete_task_queue(conn: AsyncConnection, tq_id: int, *, by: str) -> None:
    """Delete an empty TQ now (DIRAC's deleteTaskQueueIfEmpty), audited as `by`'s: 404 when it
    does not exist, 409 while it holds jobs (or a submission is filling it)."""
    if not await delete_if_empty(conn, tq_id):
        async with read_transaction(conn):
            found = await TaskQueueDB.of(conn).read([tq_id])
        if not found:
            raise NotFound(f"task queue {tq_id} does not exist")
        raise Conflict(f"task queue {tq_id} holds {found[0].jobs} waiting job(s): it is deleted once empty")
    await audit.record(conn, by, "task_queue.delete", str(tq_id))


async def delete_all_empty(conn: AsyncConnection, unchanged_for: timedelta = timedelta(0)) -> int:
    """Sweep: delete every TQ without jobs that has not changed for `unchanged_for`,
    each in its own transaction. How many went."""
    async with conn.begin():
        empty = await TaskQueueDB.of(conn).empty_ids(unchanged_for)
    deleted = 0
    for tq_id in empty:
        deleted += await delete_if_empty(conn, tq_id)
    return deleted


async def listing_page(conn: AsyncConnection, listing: QueueListing) -> tuple[int, list[Any], dict[int, Waiting]]:
    """The console's page of queues: how many pass its filters, its slice, and their waiting jobs."""
    async with read_transaction(conn):
        db = ConsoleQueueDB.of(conn)
        total = await db.count(listing)
        found = await db.page(listing)
        return total, found, await db.waiting([row.id for row in found])


async def queue_page(conn: AsyncConnection, tq_id: int) -> tuple[TaskQueue | None, Waiting | None]:
    """The console's page of one queue: the queue as the API shows it (None when it does not
    exist), and its waiting jobs per level with its oldest (None when it has none)."""
    async with read_transaction(conn):
        found = await TaskQueueDB.of(conn).read([tq_id])
        waiting = (await ConsoleQueueDB.of(conn).waiting([tq_id])).get(tq_id)
    return (found[0] if found else None), waiting
