"""Periodic work inside the service process.

Every replica runs these: each step is a conditional, row-locked change, so
two replicas doing it at once cannot do it twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.clock import utcnow
from app.jobs import store as job_store
from app.settings import Settings
from app.taskqueues import store as tq_store

log = logging.getLogger("fairmatch.background")


async def _every(
    seconds: float, engine: AsyncEngine, name: str, step: Callable[[AsyncConnection], Awaitable[int]]
) -> None:
    while True:
        await asyncio.sleep(seconds)
        try:
            async with engine.connect() as conn:
                done = await step(conn)
            if done:
                log.info("%s: %d", name, done)
        except Exception:  # keep going through database hiccups
            log.exception("%s failed", name)


def start(engine: AsyncEngine, settings: Settings) -> list[asyncio.Task]:
    return [
        asyncio.create_task(
            _every(settings.taskqueues.sweep_interval_seconds, engine, "empty task queues deleted",
                   tq_store.delete_all_empty)
        ),
        asyncio.create_task(
            _every(settings.jobs.lease_sweep_seconds, engine, "expired matches returned to Waiting",
                   lambda conn: job_store.expire_leases(conn, utcnow()))
        ),
    ]  # fmt: skip
