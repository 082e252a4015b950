"""What other areas hear of once jobs have entered task queues.

After the jobs' own commit and best effort: the priority loop counts every
level and sets every priority again anyway.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Iterable, Mapping

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.errors import DatabaseError
from fairmatch.services import priorities
from fairmatch.services.process import changing
from fairmatch.settings import Settings

log = logging.getLogger("fairmatch.jobs")


def arrivals_of(queued: Iterable[tuple[int, float]]) -> dict[int, Counter[float]]:
    """Jobs entering task queues, given as (task queue, real priority) each, counted per
    queue and level: what `record_arrivals` takes."""
    arrivals: dict[int, Counter[float]] = {}
    for tq_id, level in queued:
        arrivals.setdefault(tq_id, Counter())[level] += 1
    return arrivals


async def record_arrivals(conn: AsyncConnection, arrivals: Mapping[int, Counter[float]], *, new_jobs: bool) -> None:
    """Count committed jobs into their TQs' levels. After the commit, in a short
    transaction of its own, so that concurrent submitters to a TQ wait for each
    other only that long. Best effort: the priority loop counts every level
    again, and until then a job on a level not yet counted waits (at most
    priority.interval_seconds)."""
    if not arrivals:
        return
    try:
        async with changing(conn):
            await TaskQueueDB.of(conn).count_arrivals(arrivals, new_jobs=new_jobs)
    except DatabaseError as exc:
        log.warning("level counts of %d task queue(s) not updated: %s", len(arrivals), exc.cause)


async def refresh_priorities(
    conn: AsyncConnection, settings: Settings, group_names: Collection[str], exact: Collection[int] = ()
) -> None:
    """New TQs, and those in `exact`, get provisional priorities now. Best effort: the jobs
    are committed, and the priority loop sets every priority again anyway."""
    if not group_names:
        return
    try:
        await priorities.refresh_groups(conn, settings, group_names, exact)
    except DatabaseError as exc:
        log.warning("provisional priorities for %s not set: %s", sorted(group_names), exc.cause)
