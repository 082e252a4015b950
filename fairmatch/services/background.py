"""Periodic work inside the service process.

Watchdogs (empty queues, expired leases, stalled jobs) run in every replica:
each step is a conditional change under a row lock, so doing it twice is
harmless. The priority loop and the history sampler run in one process at a
time (advisory locks) and skip when another process just did them; so does the
purge of what the retention settings no longer keep. Each
process writes the empty matches (204s) it counted every second, and once
more when it stops; and every second gives new priorities to the groups whose
task queue one of its matches ran dry, so that their share goes to their other
queues at once rather than at the next priority run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from fairmatch.clock import utcnow
from fairmatch.errors import DatabaseError
from fairmatch.priority.settings import CorrectionsConfig
from fairmatch.services import accounting, history, retention, taskqueues, watchdogs
from fairmatch.services import priorities as priority_service
from fairmatch.services.process import Process
from fairmatch.settings import Settings

log = logging.getLogger("fairmatch.background")

# how often a process writes the 204s it counted (fairmatch/services/process.py)
EMPTY_MATCH_FLUSH_SECONDS = 1.0
# how often a process sets again the priorities of the groups whose queue its matches ran dry
DRAINED_REFRESH_SECONDS = 1.0

Step = Callable[[AsyncConnection], Awaitable[int | bool | None]]


def runner_name() -> str:
    """Who ran a priority loop: host and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def _every(seconds: float, engine: AsyncEngine, name: str, step: Step, first_delay: float | None = None) -> None:
    """`step` at a fixed rate: each starts `seconds` after the previous one started (at once
    when a step took longer), so a bound such as usage's lag is one interval."""
    await asyncio.sleep(seconds if first_delay is None else first_delay)
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        try:
            async with engine.connect() as conn:
                done = await step(conn)
            if done:
                log.info("%s: %s", name, done)
        except DatabaseError as exc:  # outages, deadlock victims: the next round tries again
            log.warning("%s failed: %s", name, exc.cause)
        except Exception:  # anything else is a bug worth its traceback; keep going anyway
            log.exception("%s failed", name)
        await asyncio.sleep(max(0.0, started + seconds - loop.time()))


async def _write_empty_matches(process: Process, seconds: float) -> None:
    """The 204s counted every `seconds`, and what is left when the process stops."""
    tally = process.empty_matches

    async def flush_quietly(conn: AsyncConnection) -> None:
        """Every second: not worth a line in the log."""
        await tally.flush(conn)

    try:
        await _every(seconds, process.engine, "pilots' empty matches written", flush_quietly)
    except asyncio.CancelledError:
        try:
            async with process.engine.connect() as conn:
                await tally.flush(conn)
        except Exception as exc:  # the counts of this process are lost; the service stops anyway
            log.warning("pilots' empty matches not written at shutdown: %s", exc)
        raise


async def watch_jobs(conn: AsyncConnection, settings: Settings) -> int:
    now = utcnow()
    return (
        await watchdogs.expire_leases(conn, now, settings)
        + await watchdogs.mark_stalled(conn, now, settings)
        + await watchdogs.settle_stalled(conn, now, settings)
    )


def start(process: Process, settings: Settings, corrections: CorrectionsConfig) -> list[asyncio.Task]:
    """The process's periodic work, its keeper's polls included."""
    engine, runner = process.engine, runner_name()
    # the corrections' longest slice, the console's chart of shares, and an hour at least
    keep = max(corrections.longest_time_span(), settings.console.samples_kept().total_seconds(), 3600)
    p = settings.priority

    async def recompute(conn: AsyncConnection) -> int | None:
        run = await priority_service.recompute(conn, settings, corrections, runner=runner, scheduled=True)
        return None if run is None else run["changed"]

    async def sample(conn: AsyncConnection) -> bool:
        now = utcnow()
        took = await history.sample(
            conn, now, p.sample_seconds, keep_seconds=keep, reported_seconds=p.reported_running_seconds
        )
        if took:  # folded charges serve only the rank policy's window
            await accounting.prune_charges(conn, now - p.charges_kept())
        return took

    async def sweep_task_queues(conn: AsyncConnection) -> int:
        return await taskqueues.delete_all_empty(conn, timedelta(seconds=settings.taskqueues.keep_empty_seconds))

    async def purge(conn: AsyncConnection) -> int | None:
        run = await retention.purge(conn, settings, utcnow(), runner=runner)
        if run is None:
            return None
        return sum(run["jobs"].values()) + run["events"] + run["request_ids"] + run["pilots"]

    tasks = [
        asyncio.create_task(_every(settings.taskqueues.sweep_interval_seconds, engine,
                                   "empty task queues deleted", sweep_task_queues)),
        asyncio.create_task(_every(settings.jobs.lease_sweep_seconds, engine,
                                   "jobs returned to Waiting, stalled or failed", lambda c: watch_jobs(c, settings))),
        asyncio.create_task(_every(p.sample_seconds, engine, "running jobs sampled", sample, first_delay=0)),
        asyncio.create_task(_every(p.interval_seconds, engine, "task-queue priorities changed", recompute,
                                   first_delay=min(1.0, p.interval_seconds))),
        asyncio.create_task(_write_empty_matches(process, EMPTY_MATCH_FLUSH_SECONDS)),
        asyncio.create_task(process.keeper.run(engine)),
        asyncio.create_task(_every(DRAINED_REFRESH_SECONDS, engine, "groups with a queue run dry given new priorities",
                                   lambda c: priority_service.refresh_drained(c, settings))),
    ]  # fmt: skip
    if settings.retention.enabled:
        interval = settings.retention.interval_seconds
        tasks.append(
            asyncio.create_task(_every(interval, engine, "rows purged", purge, first_delay=min(1.0, interval)))
        )
    return tasks
