"""The lifecycle watchdogs in process, on a simulated clock.

The watchdogs take the time they act at: a job reports at the real now and the
watchdog runs at now + the configured silences (DIRAC's two hours of stall
timeout, one more hour to fail), so nothing waits. The end-to-end module
tests/e2e/test_priority_loop.py checks that the server's loop runs them.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from fairmatch.clock import as_utc, utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.db.tables import job_events
from fairmatch.db.tables import jobs as jobs_table
from fairmatch.services import jobs, watchdogs
from tests.db.world import World

pytestmark = pytest.mark.anyio

PILOT = {"Site": "S", "CPUTime": 10**6}


def later(seconds: float) -> datetime:
    return utcnow() + timedelta(seconds=seconds)


async def running_job(world: World) -> int:
    (job_id,) = await world.submit([{"owner": "a", "owner_group": "g"}])
    assert (await world.match(PILOT))["job_id"] == job_id
    assert (await world.set_status(job_id, "Running"))["status"] == "Running"
    return job_id


async def stalled_job(world: World) -> int:
    """A Running job the watchdog found silent past the stall timeout."""
    job_id = await running_job(world)
    assert await watchdogs.mark_stalled(world.conn, later(world.settings.jobs.stall_timeout_seconds + 1),
                                        world.settings) == 1  # fmt: skip
    return job_id


async def job(world: World, job_id: int) -> dict:
    return (await jobs.get(world.conn, job_id)).model_dump()


async def events(world: World, job_id: int) -> list[tuple[str, str]]:
    stmt = select(job_events.c.status, job_events.c.source).where(job_events.c.job_id == job_id)
    async with read_transaction(world.conn):
        return [tuple(row) for row in (await world.conn.execute(stmt.order_by(job_events.c.id))).all()]


async def heartbeat(world: World, job_id: int) -> datetime:
    async with read_transaction(world.conn):
        value = (await world.conn.execute(select(jobs_table.c.heartbeat_at).where(jobs_table.c.id == job_id))).scalar()
    return as_utc(value if isinstance(value, datetime) else datetime.fromisoformat(value))


async def test_a_running_job_silent_past_the_timeout_stalls_and_a_reporting_one_does_not(world_of):
    world = await world_of()
    silent, alive = await running_job(world), await running_job(world)
    await asyncio.sleep(0.01)
    assert (await world.set_status(alive, "Running"))["status"] == "Running"  # its heartbeat, 10 ms later
    timeout = timedelta(seconds=world.settings.jobs.stall_timeout_seconds)
    assert await heartbeat(world, silent) + timedelta(milliseconds=5) < await heartbeat(world, alive)
    # just before the alive job's timeout runs out, after the silent one's
    instant = await heartbeat(world, alive) + timeout - timedelta(milliseconds=2)
    not_yet = await heartbeat(world, silent) + timeout - timedelta(milliseconds=1)
    assert await watchdogs.mark_stalled(world.conn, not_yet, world.settings) == 0
    assert await watchdogs.mark_stalled(world.conn, instant, world.settings) == 1
    assert (await job(world, alive))["status"] == "Running"
    stalled = await job(world, silent)
    assert (stalled["status"], stalled["minor_status"]) == ("Stalled", "no heartbeat")
    assert ("Stalled", "stall") in await events(world, silent)
    # a stalled job may be rescheduled by its owner
    assert (await world.set_status(silent, "Waiting"))["status"] == "Waiting"


@pytest.mark.parametrize("report", ["Running", "Done", "Failed"])
async def test_a_stalled_job_whose_pilot_reports_again_takes_that_state(world_of, report):
    """As DIRAC's stalled-job agent: the pilot was only late. The report is an event."""
    world = await world_of()
    job_id = await stalled_job(world)
    answer = await world.set_status(job_id, report)
    assert answer["status"] == report
    assert (answer["finished_at"] is not None) == (report != "Running")
    assert (await events(world, job_id))[-2:] == [("Stalled", "stall"), (report, "api")]


@pytest.mark.parametrize("reschedule", [False, True], ids=["fails", "rescheduled"])
async def test_a_job_stalled_too_long_fails_or_is_rescheduled(world_of, reschedule):
    world = await world_of(jobs={"reschedule_stalled": reschedule})
    job_id = await stalled_job(world)
    silence = world.settings.jobs.stall_timeout_seconds + world.settings.jobs.stalled_fail_seconds
    assert await watchdogs.settle_stalled(world.conn, later(silence - 5), world.settings) == 0  # not yet
    assert await watchdogs.settle_stalled(world.conn, later(silence + 1), world.settings) == 1
    settled = "Waiting" if reschedule else "Failed"
    moved = await job(world, job_id)
    assert (moved["status"], moved["minor_status"]) == (settled, watchdogs.STALLED_TOO_LONG)
    assert (moved["finished_at"] is not None) == (not reschedule)
    assert (settled, "stall") in await events(world, job_id)
    if reschedule:  # back in a queue: the next pilot gets it, and the return is counted
        assert moved["reschedules"] == 1
        assert (await world.match(PILOT))["job_id"] == job_id
    else:
        assert await world.match(PILOT) is None


async def test_a_stalled_job_that_reports_in_time_is_left_alone(world_of):
    """The watchdog re-checks: a job reporting while stalled is no longer due."""
    world = await world_of()
    job_id = await stalled_job(world)
    assert (await world.set_status(job_id, "Running"))["status"] == "Running"
    silence = world.settings.jobs.stall_timeout_seconds + world.settings.jobs.stalled_fail_seconds
    assert await watchdogs.settle_stalled(world.conn, later(silence + 1), world.settings) == 0
    assert (await job(world, job_id))["status"] == "Running"
