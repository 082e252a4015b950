"""Periodic work inside the service process."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from app.settings import Settings
from app.taskqueues import store as tq_store

log = logging.getLogger("fairmatch.background")


async def sweep_empty_task_queues(engine: AsyncEngine, settings: Settings) -> None:
    """Delete TQs that lost their last job outside the match path (kills, races)."""
    while True:
        await asyncio.sleep(settings.taskqueues.sweep_interval_seconds)
        try:
            async with engine.connect() as conn:
                deleted = await tq_store.delete_all_empty(conn)
            if deleted:
                log.info("deleted %d empty task queue(s)", deleted)
        except Exception:  # keep sweeping through database hiccups
            log.exception("empty task-queue sweep failed")
