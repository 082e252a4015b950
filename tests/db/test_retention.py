"""The purge in process, on both backends, at a simulated `now` days ahead.

The purge takes the time it acts at: jobs finish at the real now, and the purge
runs at now + the retention settings' days, so nothing waits.
"""

from __future__ import annotations

import asyncio
import fcntl
import gzip
import os
import random
from datetime import datetime, timedelta
from typing import Any

import orjson
import psycopg
import pytest
from sqlalchemy import func, select

from fairmatch.clock import utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.db.tables import (
    job_events,
    job_specs,
    jobs,
    match_requests,
    pilots,
    purge_runs,
    usage_charges,
    usage_totals,
)
from fairmatch.errors import ArchiveUnavailable
from fairmatch.jobs.models import StatusUpdate
from fairmatch.matching.resource import ClaimingResource
from fairmatch.matching.settings import MatchingSettings
from fairmatch.services import jobs as job_service
from fairmatch.services import matching, retention
from fairmatch.services.status import summary
from tests.db.world import World

pytestmark = pytest.mark.anyio

PILOT = {"Site": "S", "CPUTime": 10**6}


def days_ahead(days: float) -> datetime:
    return utcnow() + timedelta(days=days)


async def matched(world: World, owner: str = "a", group: str = "g", **claim: Any) -> int:
    (job_id,) = await world.submit([{"owner": owner, "owner_group": group, "payload": {"run": owner}}])
    job = await claim_one(world, **claim)
    assert job is not None and job["job_id"] == job_id
    return job_id


async def claim_one(world: World, **claim: Any) -> dict[str, Any] | None:
    resource = ClaimingResource(**PILOT, **claim)
    job = await matching.match(world.conn, resource, world.settings, random.Random(1), "pilot", world.process)
    return None if job is None else job.model_dump()


async def report(world: World, job_id: int, status: str, cpu_seconds: float | None = None) -> dict[str, Any]:
    update = StatusUpdate(status=status, cpu_seconds=cpu_seconds)
    return await job_service.report_status(world.conn, job_id, update, world.settings, by="pilot")


async def finished(
    world: World, status: str, owner: str = "a", group: str = "g", cpu: float = 100.0, **claim: Any
) -> int:
    job_id = await matched(world, owner, group, **claim)
    if status == "Killed":
        await job_service.kill(world.conn, job_id, by="alice")
        return job_id
    await report(world, job_id, "Running")
    await report(world, job_id, status, cpu)
    return job_id


async def rows(world: World, table: Any, *where: Any) -> list[Any]:
    async with read_transaction(world.conn):
        return list((await world.conn.execute(select(table).where(*where))).all())


async def count(world: World, table: Any) -> int:
    async with read_transaction(world.conn):
        return (await world.conn.execute(select(func.count()).select_from(table))).scalar_one()


async def job_ids(world: World) -> set[int]:
    return {row.id for row in await rows(world, jobs)}


async def purge(world: World, now: datetime) -> dict[str, Any]:
    run = await retention.purge(world.conn, world.settings, now, runner="test", scheduled=False)
    assert run is not None
    return run


async def test_final_jobs_go_after_their_days_with_their_specs_events_and_request_ids(world_of):
    world = await world_of(retention={"done_days": 1, "failed_days": 3, "killed_days": 2, "batch_size": 2})
    done = [await finished(world, "Done") for _ in range(3)]  # two batches
    failed, killed = await finished(world, "Failed"), await finished(world, "Killed")
    (waiting,) = await world.submit([{"owner": "w", "owner_group": "g", "sites": ["elsewhere"]}])
    still_matched = await matched(world)
    running = await matched(world)
    await report(world, running, "Running")
    everything = {*done, failed, killed, waiting, still_matched, running}
    assert await job_ids(world) == everything

    assert await purge(world, days_ahead(0.5)) | {"jobs": None} == {
        "runner": "test", "started_at": pytest.approx(utcnow(), abs=timedelta(seconds=30)),
        "finished_at": pytest.approx(utcnow(), abs=timedelta(seconds=30)), "jobs": None, "events": 0,
        "request_ids": 0, "pilots": 0, "archived": 0, "error": None, "indexes_rebuilt": [],
    }  # fmt: skip
    assert await job_ids(world) == everything
    run = await purge(world, days_ahead(1.5))
    assert run["jobs"] == {"Done": 3, "Failed": 0, "HandedOff": 0, "Killed": 0}
    assert await job_ids(world) == everything - set(done)
    run = await purge(world, days_ahead(2.5))
    assert run["jobs"] == {"Done": 0, "Failed": 0, "HandedOff": 0, "Killed": 1}
    run = await purge(world, days_ahead(100))
    assert run["jobs"] == {"Done": 0, "Failed": 1, "HandedOff": 0, "Killed": 0}
    # what is not final stays, however old
    assert await job_ids(world) == {waiting, still_matched, running}
    remaining = {waiting, still_matched, running}
    for table in (job_specs, job_events):
        assert {row.job_id for row in await rows(world, table)} == remaining
    assert {row.job_id for row in await rows(world, match_requests)} <= remaining


async def test_events_of_finished_jobs_go_before_the_jobs(world_of):
    world = await world_of(retention={"done_days": 5, "events_days": 1, "batch_size": 1})
    old = [await finished(world, "Done") for _ in range(2)]
    running = await matched(world)
    await report(world, running, "Running")
    running_events = len(await rows(world, job_events, job_events.c.job_id == running))

    assert (await purge(world, days_ahead(0.5)))["events"] == 0
    run = await purge(world, days_ahead(1))  # the events of the jobs finished until now
    assert run["events"] == 2 * 4  # Waiting, Matched, Running, Done each
    assert run["jobs"]["Done"] == 0
    assert await job_ids(world) == {*old, running}
    assert [row.job_id for row in await rows(world, job_events)] == [running] * running_events
    # the next run starts where this one stopped: a job finished since loses its events too
    late = await finished(world, "Done")
    assert (await purge(world, days_ahead(1)))["events"] == 4
    assert await rows(world, job_events, job_events.c.job_id == late) == []


async def test_the_archive_holds_each_purged_job_as_it_was(world_of, tmp_path):
    directory = tmp_path / "archive" / "jobs"  # made when missing
    world = await world_of(retention={"archive_dir": str(directory), "batch_size": 2})
    ids = [await finished(world, status, owner=f"o{i}") for i, status in enumerate(["Done", "Done", "Failed"])]
    before = {job_id: (await job_service.get(world.conn, job_id)).model_dump() for job_id in ids}
    events = {job_id: await rows(world, job_events, job_events.c.job_id == job_id) for job_id in ids}

    run = await purge(world, days_ahead(30))
    assert (run["archived"], run["jobs"]) == (3, {"Done": 2, "Failed": 1, "HandedOff": 0, "Killed": 0})
    (archive_file,) = directory.iterdir()
    assert archive_file.name == f"jobs-{utcnow():%Y-%m-%d}.jsonl.gz"  # the day they finished (UTC)
    with gzip.open(archive_file) as stream:
        lines = [orjson.loads(line) for line in stream]
    assert sorted(line["job"]["id"] for line in lines) == ids
    for line in lines:
        job = before[line["job"]["id"]]
        assert line["job"]["status"] == job["status"] and line["job"]["owner"] == job["owner"]
        assert line["job"]["finished_at"] == job["finished_at"].isoformat().replace("+00:00", "Z")
        assert line["payload"] == job["payload"] == {"run": job["owner"]}
        assert line["requirements"]["owner"] == job["owner"]
        assert [(e["status"], e["source"]) for e in line["events"]] == [
            (e.status, e.source) for e in events[job["job_id"]]
        ]
    # a later purge appends a gzip member: the file reads as one stream of both
    again = await finished(world, "Killed")
    assert (await purge(world, days_ahead(30)))["archived"] == 1
    with gzip.open(archive_file) as stream:
        assert [orjson.loads(line)["job"]["id"] for line in stream][-1] == again


async def test_a_purge_stopped_with_the_service_is_recorded_and_keeps_what_it_had_not_deleted(world_of, tmp_path):
    """A stop (a cancelled task: SIGTERM, a rolling restart) between a batch's archive and its
    delete rolls the batch back and records the run as stopped, so that no replica waits for it."""
    directory = tmp_path / "archive"
    directory.mkdir()
    # purges a millisecond apart: only a run in progress would keep another replica's from running
    world = await world_of(retention={"archive_dir": str(directory), "interval_seconds": 0.002})
    job_id = await finished(world, "Done")
    finished_at = (await job_service.get(world.conn, job_id)).finished_at
    # the archive file held locked: the purge waits in its append, between its select and its delete
    with (directory / f"jobs-{finished_at:%Y-%m-%d}.jsonl.gz").open("ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        task = asyncio.create_task(
            retention.purge(world.conn, world.settings, days_ahead(30), runner="test", scheduled=False)
        )
        while not _waited_for(os.fstat(held.fileno()).st_ino):
            assert not task.done(), "the purge finished while its archive file was locked"
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    (run,) = await rows(world, purge_runs)
    assert (run.error, run.finished_at is not None) == (retention.SHUTDOWN, True)
    assert await job_ids(world) == {job_id}  # its delete rolled back (its archive line may stay)
    # another replica's scheduled purge does not wait for the stopped run
    later = await retention.purge(world.conn, world.settings, days_ahead(30), runner="another")
    assert later is not None and later["jobs"]["Done"] == 1


def _waited_for(inode: int) -> bool:
    """Whether a process waits for a lock on the file `inode` (the kernel's list of file locks
    writes a waiter `-> FLOCK …` with the file as `major:minor:inode`)."""
    with open("/proc/locks") as locks:
        return any(" -> " in line and f":{inode} " in line for line in locks)


async def test_an_archive_that_cannot_be_written_stops_the_purge_before_it_deletes_anything(world_of, tmp_path):
    not_a_directory = tmp_path / "taken"
    not_a_directory.write_text("a file where the archive should be")
    world = await world_of(retention={"archive_dir": str(not_a_directory), "request_ids_hours": 1})
    done = await finished(world, "Done", request_id="r1", PilotReference="p1")
    requests, pilot_rows = await count(world, match_requests), await count(world, pilots)

    run = await purge(world, days_ahead(30))
    assert "archive directory" in run["error"] and str(not_a_directory) in run["error"]
    assert (run["jobs"], run["archived"], run["request_ids"], run["pilots"]) == (
        {"Done": 0, "Failed": 0, "HandedOff": 0, "Killed": 0}, 0, 0, 0,
    )  # fmt: skip
    assert await job_ids(world) == {done}
    assert (await count(world, match_requests), await count(world, pilots)) == (requests, pilot_rows) == (1, 1)
    assert (await summary(world.conn, 1, MatchingSettings()))["last_purge"]["error"] == run["error"]
    with pytest.raises(ArchiveUnavailable, match="archive directory"):
        await retention.purge_jobs(world.conn, world.settings, timedelta(0), ["Done"], dry_run=False, runner="t")
    assert await job_ids(world) == {done}


async def test_a_request_id_past_its_time_is_a_new_request(world_of):
    world = await world_of(retention={"request_ids_hours": 2})
    await world.submit([{"owner": "a", "owner_group": "g"}, {"owner": "a", "owner_group": "g"}])
    first = await claim_one(world, request_id="r-1")
    assert first is not None
    assert (await claim_one(world, request_id="r-1"))["job_id"] == first["job_id"]  # a replay
    assert (await purge(world, utcnow() + timedelta(hours=1)))["request_ids"] == 0
    assert (await claim_one(world, request_id="r-1"))["job_id"] == first["job_id"]

    assert (await purge(world, utcnow() + timedelta(hours=3)))["request_ids"] == 1
    second = await claim_one(world, request_id="r-1")
    assert second is not None and second["job_id"] != first["job_id"]
    assert (await claim_one(world, request_id="r-1"))["job_id"] == second["job_id"]  # its own replay now
    assert (await job_service.get(world.conn, first["job_id"])).status == "Matched"  # the job stays


async def test_pilots_last_seen_long_ago_go(world_of):
    world = await world_of(retention={"pilots_days": 3})
    await matched(world, PilotReference="old")
    assert (await purge(world, days_ahead(2)))["pilots"] == 0
    assert [row.reference for row in await rows(world, pilots)] == ["old"]
    assert (await purge(world, days_ahead(4)))["pilots"] == 1
    assert await rows(world, pilots) == []


def priorities_of(run: dict[str, Any]) -> dict[int, float]:
    return {tq["task_queue_id"]: tq["priority"] for tq in run["task_queue_priorities"]}


async def test_a_purge_changes_no_priority_and_no_usage(world_of):
    """Usage totals, charges (folded or not), running counts and history stay: the priorities
    recomputed after a purge are those recomputed before it."""
    # hours of CPU charged by jobs that live milliseconds: a clock skew that lets them through
    world = await world_of(priority={"policy": "multifactor"}, retention={"done_days": 1, "failed_days": 1},
                           jobs={"clock_skew_seconds": 10**5})  # fmt: skip
    for group, owner, cpu in [("g1", "alice", 5000.0), ("g1", "bob", 100.0), ("g2", "carol", 20000.0)]:
        await finished(world, "Done", owner, group, cpu)
        await finished(world, "Failed", owner, group, cpu / 2)
    running = await matched(world, "alice", "g1")
    await report(world, running, "Running")
    await world.sample(utcnow())
    await world.submit([{"owner": o, "owner_group": g, "sites": ["W"]}
                        for g, o in [("g1", "alice"), ("g1", "bob"), ("g2", "carol")]])  # fmt: skip
    before = priorities_of(await world.recompute())  # folds the charges
    assert len(set(before.values())) == 3  # the usage tells the owners apart

    assert sum((await purge(world, days_ahead(2)))["jobs"].values()) == 6
    assert (await job_service.get(world.conn, running)).status == "Running"
    assert priorities_of(await world.recompute()) == pytest.approx(before, rel=1e-6)

    # a charge not folded yet when its job is purged is folded all the same
    late = await finished(world, "Done", "bob", "g1", 7000.0)
    charges, totals = await rows(world, usage_charges), await rows(world, usage_totals)
    assert [(c.job_id, c.folded_at) for c in charges if c.folded_at is None] == [(late, None)]
    assert (await purge(world, days_ahead(2)))["jobs"]["Done"] == 1
    assert (await rows(world, usage_charges), await rows(world, usage_totals)) == (charges, totals)
    after = priorities_of(await world.recompute())
    bob = next(tq for tq in (await world.task_queues()) if tq["owner"] == "bob" and tq["jobs"])["task_queue_id"]
    assert after[bob] < before[bob]  # bob's new usage lowers his priority


@pytest.mark.parametrize("template", ["postgresql"], indirect=True)
async def test_rows_a_report_or_a_claim_holds_are_skipped_without_waiting(world_of, cloned):
    """A status report locks its job's row, a claim its pilot's: the purge leaves both for its
    next run instead of waiting for them."""
    world = await world_of(retention={"request_ids_hours": 1})
    held = await finished(world, "Done", PilotReference="held")
    free = await finished(world, "Done", PilotReference="free")
    with psycopg.connect(cloned.url) as other:  # one transaction, open until the block ends
        other.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", [held])
        other.execute("UPDATE pilots SET matches = matches WHERE reference = 'held'")
        run = await asyncio.wait_for(purge(world, days_ahead(30)), timeout=10)
        assert (run["jobs"]["Done"], run["pilots"]) == (1, 1)
        assert await job_ids(world) == {held}
        assert free not in await job_ids(world)
    run = await purge(world, days_ahead(30))
    assert (run["jobs"]["Done"], run["pilots"]) == (1, 1)
    assert await job_ids(world) == set()


async def test_one_purge_at_a_time(world_of):
    """A run in progress elsewhere (its row started, not finished) makes the others skip their
    turn, unless it is so old its process must have died; a scheduled run also skips when one
    finished less than half an interval ago."""
    world = await world_of(retention={"interval_seconds": 600})
    await finished(world, "Done")

    async def scheduled() -> dict[str, Any] | None:
        return await retention.purge(world.conn, world.settings, days_ahead(30), runner="test")

    cases = [
        ("another replica", utcnow() - timedelta(minutes=5), False),  # still running
        ("another replica", utcnow() - timedelta(minutes=11), True),  # its process died
        ("test", utcnow() - timedelta(minutes=5), True),  # this runner's own, cut short by an outage
    ]
    for runner, started, runs in cases:
        async with world.conn.begin():
            await world.conn.execute(purge_runs.delete())
            await world.conn.execute(purge_runs.insert().values(
                runner=runner, started_at=started, jobs={}, events=0, request_ids=0, pilots=0, archived=0,
            ))  # fmt: skip
        assert (await scheduled() is not None) is runs, runner
    assert await job_ids(world) == set()
    assert await scheduled() is None  # the run just finished
    assert (await summary(world.conn, 1, MatchingSettings()))["last_purge"]["runner"] == "test"  # a finished one
    assert await purge(world, days_ahead(30)) is not None  # unscheduled: at once
