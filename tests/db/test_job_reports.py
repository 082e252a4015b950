"""Status reports and reads of a job on a caller's behalf, in the data layer, on both backends.

A report is one step (on PostgreSQL one statement): the transition, the scope
and the charge are each decided by one rule, the event and the charge commit
with the change or not at all. Jobs are put in the state a test needs with
plain SQL, so that nothing here depends on how a claim is made.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import text

from fairmatch.auth.policy import JobScope
from fairmatch.clock import utcnow
from fairmatch.db.engine import read_transaction
from fairmatch.errors import Conflict, NotFound
from fairmatch.jobs.filters import JobFilter
from fairmatch.jobs.models import StatusUpdate
from fairmatch.services import jobs
from tests.db.world import World

pytestmark = pytest.mark.anyio


async def hand_out(conn, job_id: int, pilot: str) -> None:
    """The job as a claim leaves it: Matched by `pilot` at site S, out of its queue."""
    async with conn.begin():
        await conn.execute(text("DELETE FROM tq_jobs WHERE job_id = :id"), {"id": job_id})
        await conn.execute(
            text(
                "UPDATE jobs SET status = 'Matched', matched_by = :pilot, site = 'S', matched_at = :now, "
                "lease_expires_at = :lease WHERE id = :id"
            ),
            {"id": job_id, "pilot": pilot, "now": utcnow(), "lease": utcnow() + timedelta(minutes=10)},
        )


async def rows(conn, sql: str, **params) -> list[tuple]:
    async with read_transaction(conn):
        return [tuple(r) for r in await conn.execute(text(sql), params)]


async def test_every_read_and_report_sees_what_the_scope_rule_says(engine, settings):
    """The scope's one SQL rendering (listing, read, report) against its rule, job by job."""
    async with engine.connect() as conn:
        world = World(conn, settings, seed=1)
        people = [("alice", "g1"), ("alice", "g2"), ("bob", "g1"), ("bob", "g3")]
        ids = await world.submit([{"owner": o, "owner_group": g} for o, g in people for _ in range(2)])
        pilots = dict(zip(ids, itertools.cycle(["p1", "p2", None])))
        for job_id, pilot in pilots.items():
            if pilot is not None:
                await hand_out(conn, job_id, pilot)
        owners = [person for person in people for _ in range(2)]
        facts = [SimpleNamespace(id=job_id, owner=owner, owner_group=group, matched_by=pilots[job_id])
                 for job_id, (owner, group) in zip(ids, owners)]  # fmt: skip
        scopes = [
            JobScope(),
            JobScope(owner="alice", owner_groups=frozenset({"g1"})),
            JobScope(owner="alice", owner_groups=frozenset({"g1", "g2"})),
            JobScope(owner="bob", owner_groups=frozenset()),
            JobScope(matched_by="p1"),
            JobScope(matched_by="nobody"),
        ]
        seen_by = {scope: [job.id for job in facts if scope.sees(job)] for scope in scopes}
        for scope in scopes:
            page, _ = await jobs.list_jobs(conn, JobFilter(), after_id=0, limit=100, scope=scope)
            assert [j.job_id for j in page] == seen_by[scope], scope
            for job_id in ids:
                if job_id in seen_by[scope]:
                    assert (await jobs.get(conn, job_id, scope)).job_id == job_id
                else:
                    with pytest.raises(NotFound):
                        await jobs.get(conn, job_id, scope)
        # a pilot reports its own jobs only; another's is missing, and stays as it was
        mine, theirs = seen_by[JobScope(matched_by="p1")][0], ids[1]
        with pytest.raises(NotFound):
            await jobs.report_status(
                conn, theirs, StatusUpdate(status="Running"), settings, JobScope(matched_by="p1"), by="p1"
            )
        assert (await jobs.get(conn, theirs)).status == "Matched"
        running = await jobs.report_status(conn, mine, StatusUpdate(status="Running"), settings,
                                           JobScope(matched_by="p1"), by="p1")  # fmt: skip
        assert running == await jobs.get(conn, mine)


async def test_a_finish_without_cpu_seconds_charges_what_the_job_reported_before(engine, settings):
    async with engine.connect() as conn:
        world = World(conn, settings, seed=1)
        reported, silent = await world.submit([{"owner": "alice", "owner_group": "g"}] * 2)
        for job_id in (reported, silent):
            await hand_out(conn, job_id, "p1")
        await jobs.report_status(conn, reported, StatusUpdate(status="Running", cpu_seconds=40.0), settings, by="pilot")
        await jobs.report_status(conn, silent, StatusUpdate(status="Running"), settings, by="pilot")
        done = await jobs.report_status(conn, reported, StatusUpdate(status="Done"), settings, by="pilot")
        assert (done.status, done.cpu_seconds) == ("Done", 40.0)
        failed = await jobs.report_status(conn, silent, StatusUpdate(status="Failed"), settings, by="pilot")
        assert failed.status == "Failed"
        weight = settings.accounting.cpu_weight
        assert await rows(conn, "SELECT job_id, charge, account FROM usage_charges") == [(reported, 40.0 * weight, "g")]


async def test_a_refused_report_changes_nothing(engine, settings):
    async with engine.connect() as conn:
        world = World(conn, settings, seed=1)
        [job_id] = await world.submit([{"owner": "alice", "owner_group": "g"}])
        await hand_out(conn, job_id, "p1")
        before = await jobs.get(conn, job_id)
        with pytest.raises(Conflict) as refused:
            await jobs.report_status(conn, job_id, StatusUpdate(status="Done", cpu_seconds=5.0), settings, by="pilot")
        assert refused.value.extra == {"current_status": "Matched", "requested_status": "Done"}
        assert await jobs.get(conn, job_id) == before
        assert await rows(conn, "SELECT count(*) FROM usage_charges") == [(0,)]
        assert await rows(conn, "SELECT status FROM job_events WHERE job_id = :id", id=job_id) == [("Waiting",)]
        with pytest.raises(NotFound):
            await jobs.report_status(conn, job_id + 1, StatusUpdate(status="Running"), settings, by="pilot")


async def test_reports_racing_to_finish_a_job_finish_and_charge_it_once(engine, settings, cloned):
    """Eight pilots' retries of one Done at once, and heartbeats among them (PostgreSQL's row lock)."""
    if cloned.backend != "postgresql":
        pytest.skip("concurrent transactions: PostgreSQL")
    async with engine.connect() as conn:
        world = World(conn, settings, seed=1)
        [job_id] = await world.submit([{"owner": "alice", "owner_group": "g"}])
        await hand_out(conn, job_id, "p1")
        await jobs.report_status(conn, job_id, StatusUpdate(status="Running"), settings, by="pilot")
        beat = await jobs.report_status(
            conn, job_id, StatusUpdate(status="Running", cpu_seconds=3.0), settings, by="pilot"
        )
        assert (beat.status, beat.cpu_seconds) == ("Running", 3.0)

    async def report(status: str) -> str:
        async with engine.connect() as own:
            try:
                update = StatusUpdate(status=status, cpu_seconds=10.0)
                return (await jobs.report_status(own, job_id, update, settings, by="pilot")).status
            except Conflict:
                return "refused"

    outcomes = await asyncio.gather(*(report(s) for s in ["Done"] * 8 + ["Running"] * 4))
    done = outcomes[:8]
    assert sorted(done) == ["Done"] + ["refused"] * 7
    async with engine.connect() as conn:
        assert await rows(conn, "SELECT count(*) FROM usage_charges WHERE job_id = :id", id=job_id) == [(1,)]
        events = await rows(conn, "SELECT status FROM job_events WHERE job_id = :id ORDER BY id", id=job_id)
        assert events == [("Waiting",), ("Running",), ("Done",)]  # heartbeats are not events
        assert (await jobs.get(conn, job_id)).status == "Done"
